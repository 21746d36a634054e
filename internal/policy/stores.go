package policy

import (
	"context"
	"sync"

	"github.com/harness9/compaction-operator/compaction/storage/s3"
)

// maxStores bounds the cache; configurations change only when policies or their credentials
// do, so a full cache is simply emptied.
const maxStores = 256

// Stores hands out one S3 store per configuration, so every reconcile and request for the same
// bucket and credentials shares one client and its connection pool. The zero value is ready.
type Stores struct {
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
	st, err := s3.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if c.stores == nil || len(c.stores) >= maxStores {
		c.stores = make(map[s3.Config]*s3.Store)
	}
	c.stores[cfg] = st
	return st, nil
}
