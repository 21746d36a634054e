package policy

import (
	"context"
	"fmt"
	"sync"

	"github.com/minio/minio-go/v7"

	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
)

// maxStores bounds the cache; configurations change only when policies or their credentials
// do, so a full cache is simply emptied.
const maxStores = 256

// Stores hands out one S3 store per configuration, so every reconcile and request for the same
// bucket and credentials shares one client and its connection pool. The zero value is ready.
type Stores struct {
	// Endpoints, when set, is checked on every connection a store makes (see egress).
	Endpoints *egress.Allowlist

	mu     sync.Mutex
	stores map[s3.Config]*s3.Store
}

// Get returns the store for cfg, creating it on first use.
func (c *Stores) Get(ctx context.Context, cfg s3.Config) (*s3.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stores[cfg]; ok {
		return st, nil
	}
	var opts []s3.Option
	if c.Endpoints != nil {
		base, err := minio.DefaultTransport(!cfg.Insecure)
		if err != nil {
			return nil, fmt.Errorf("s3 transport: %w", err)
		}
		opts = append(opts, s3.WithTransport(c.Endpoints.Transport(base)))
	}
	st, err := s3.New(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	if c.stores == nil || len(c.stores) >= maxStores {
		c.stores = make(map[s3.Config]*s3.Store)
	}
	c.stores[cfg] = st
	return st, nil
}
