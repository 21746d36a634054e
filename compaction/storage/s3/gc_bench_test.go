package s3

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/harness9/compaction-operator/internal/dev/testenv"
)

// BenchmarkDeleteSession10k measures garbage collection of a session with 10,000 offloaded
// tool results against a real MinIO: the time until none is left, and the delete requests
// used (batches of up to 1,000 keys).
//
//	go test -run '^$' -bench DeleteSession10k -benchtime 1x ./compaction/storage/s3/
func BenchmarkDeleteSession10k(b *testing.B) {
	m := testenv.StartMinIO(b)
	ctx := context.Background()
	const objects = 10000
	for i := range b.N {
		bucket := fmt.Sprintf("gc-bench-%d", i)
		base, err := minio.DefaultTransport(false)
		if err != nil {
			b.Fatal(err)
		}
		rt := &recordingTransport{base: base}
		st, err := newStore(ctx, Config{Endpoint: m.Endpoint, Bucket: bucket, Insecure: true, AccessKey: m.AccessKey, SecretKey: m.SecretKey}, rt)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.EnsureBucket(ctx, true); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ids := make(chan int)
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range ids {
					if _, err := st.PutToolResult(ctx, "session-1", fmt.Sprintf("call_%05d", j), "x"); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for j := range objects {
			ids <- j
		}
		close(ids)
		wg.Wait()
		rt.take()
		b.StartTimer()
		start := time.Now()
		n, err := st.DeleteSession(ctx, "session-1")
		if err != nil || n != objects {
			b.Fatalf("DeleteSession: %d removed, %v", n, err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s/10k-objects")
		deletes, lists := 0, 0
		for _, r := range rt.take() {
			switch {
			case strings.HasPrefix(r, "POST ") && strings.Contains(r, "delete"):
				deletes++
			case strings.HasPrefix(r, "GET "):
				lists++
			}
		}
		b.ReportMetric(float64(deletes), "delete-requests")
		b.ReportMetric(float64(lists), "list-requests")
	}
}
