//go:build !unix

package compaction_test

import "time"

// processCPU is not available here: benchmarks leave out their CPU time metric.
func processCPU() (time.Duration, bool) { return 0, false }
