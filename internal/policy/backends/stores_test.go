package backends

import (
	"context"
	"fmt"
	"testing"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
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

// The store speaks plain HTTP only to a location whose protocol says HTTP; a location pinned
// before the field existed reads as HTTPS or HTTP (see policy.Locations), never as "".
func TestS3ConfigInsecureFromProtocol(t *testing.T) {
	t.Parallel()
	for _, p := range []compactionv1alpha1.S3Protocol{compactionv1alpha1.S3HTTP, compactionv1alpha1.S3HTTPS} {
		cfg, err := S3Config(context.Background(), nil, &compactionv1alpha1.RecordsLocation{Endpoint: "minio:9000", Bucket: "bkt", Protocol: p})
		if err != nil || cfg.Insecure != (p == compactionv1alpha1.S3HTTP) {
			t.Errorf("protocol %s: store config insecure %v, %v", p, cfg.Insecure, err)
		}
	}
}
