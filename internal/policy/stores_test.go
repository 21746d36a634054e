package policy

import (
	"context"
	"fmt"
	"testing"

	"github.com/harness9/compaction-operator/compaction/storage/s3"
)

// One client per configuration; past the cache's size the least recently used one
// is dropped, not the whole cache.
func TestStoresShareAndEvictLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := Stores{size: 4} // each store costs a client: keep the test quick
	cfg := func(i int) s3.Config {
		return s3.Config{Endpoint: "minio.example:9000", Bucket: fmt.Sprintf("bucket-%d", i)}
	}
	get := func(i int) *s3.Store {
		t.Helper()
		st, err := c.Get(ctx, cfg(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	first, hot := get(0), get(1)
	if get(0) != first {
		t.Fatal("the same configuration got a second store")
	}
	for i := 2; i <= c.size; i++ {
		get(i)
		get(1) // keep 1 recently used
	}
	// size+1 configurations seen: the least recently used one, 0, was dropped.
	if get(1) != hot {
		t.Error("a recently used store was dropped")
	}
	if get(0) == first {
		t.Error("the least recently used store was kept past the size")
	}
	if _, err := c.Get(ctx, s3.Config{Bucket: "b"}, nil); err == nil {
		t.Error("a configuration without an endpoint got a store")
	}
}
