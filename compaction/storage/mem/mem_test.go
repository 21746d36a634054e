package mem_test

import (
	"testing"

	"github.com/harness9/compaction-operator/compaction"
	"github.com/harness9/compaction-operator/compaction/storage/mem"
	"github.com/harness9/compaction-operator/compaction/storage/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) compaction.Store { return mem.New() })
}
