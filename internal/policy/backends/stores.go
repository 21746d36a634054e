package backends

import (
	"context"
	"fmt"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	compactionv1alpha1 "github.com/harness9/compaction-operator/api/v1alpha1"
	"github.com/harness9/compaction-operator/compaction/storage/s3"
	"github.com/harness9/compaction-operator/internal/egress"
	"github.com/harness9/compaction-operator/internal/policy"
)

// maxStores bounds the cache; configurations change only when policies or their credentials
// do, so the least recently used store is the one to drop (nothing to close: its idle
// connections time out).
const maxStores = 256

// Stores hands out one S3 store per configuration, so every reconcile and request for the same
// bucket and credentials shares one client and its connection pool. The zero value is ready.
// It is the manager's policy.StoreOpener.
type Stores struct {
	// mu is held across the creation of a store, so concurrent first uses of a configuration
	// share one client.
	mu     sync.Mutex
	stores *lru.Cache[storeKey, *s3.Store] // created on first use
	size   int                             // of stores; maxStores when 0 (tests set less)
}

var _ policy.StoreOpener = (*Stores)(nil)

// storeKey is a configuration and the list its connections are checked against: a cluster
// and a namespaced policy on one bucket do not share a client, as their lists differ.
type storeKey struct {
	cfg     s3.Config
	allowed *egress.Allowlist
}

// Get returns the store for cfg whose every connection allowed checks (see egress; nil
// checks nothing), creating it on first use. Pass the same list for the same policies
// (Access.EndpointsFor): it is part of the cache key.
func (c *Stores) Get(ctx context.Context, cfg s3.Config, allowed *egress.Allowlist) (*s3.Store, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stores == nil {
		size := c.size
		if size <= 0 {
			size = maxStores
		}
		stores, err := lru.New[storeKey, *s3.Store](size)
		if err != nil {
			return nil, fmt.Errorf("s3 store cache: %w", err)
		}
		c.stores = stores
	}
	key := storeKey{cfg: cfg, allowed: allowed}
	if st, ok := c.stores.Get(key); ok {
		return st, nil
	}
	var opts []s3.Option
	if allowed != nil {
		// The store's default transport, dialing only where allowed says.
		base, err := s3.DefaultTransport(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, s3.WithTransport(allowed.Transport(base)))
	}
	st, err := s3.New(ctx, cfg, opts...)
	if err != nil {
		return nil, err
	}
	c.stores.Add(key, st)
	return st, nil
}

// Open is the store at loc, its credentials read through secrets, whose connections allowed
// checks (Get). The errors are S3Config's and the store's own, which say what failed.
func (c *Stores) Open(ctx context.Context, secrets policy.SecretReader, loc *compactionv1alpha1.RecordsLocation, allowed *egress.Allowlist) (policy.SessionStore, error) {
	cfg, err := S3Config(ctx, secrets, loc)
	if err != nil {
		return nil, err
	}
	st, err := c.Get(ctx, cfg, allowed)
	if err != nil {
		return nil, err
	}
	return st, nil
}
