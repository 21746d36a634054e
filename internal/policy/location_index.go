package policy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LocationIndex holds the pinned locations of Namespace that the manager's cache watches (see
// LocationCache), by name, as its ConfigMap informer delivers them. It is for the compaction
// API, which reads a session's location on every request: a Get from the manager's cache of
// ConfigMaps (a cache of one namespace) asks the RESTMapper whether a ConfigMap is namespaced
// and deep-copies it each time, about 7% of the API's CPU at 200 agents. The ConfigMaps it
// returns are the informer's own: read them, never change them.
type LocationIndex struct {
	namespace string
	mu        sync.RWMutex
	byName    map[string]*corev1.ConfigMap
	synced    func() bool
	// ready latches synced: a registration that has synced stays so.
	ready atomic.Bool
}

// NewLocationIndex registers the index on informers' ConfigMap informer (the manager's
// cache, before or after it starts); it answers once that informer has synced.
func NewLocationIndex(ctx context.Context, informers cache.Informers, namespace string) (*LocationIndex, error) {
	inf, err := informers.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("pinned locations informer: %w", err)
	}
	x := &LocationIndex{namespace: namespace, byName: map[string]*corev1.ConfigMap{}}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    x.set,
		UpdateFunc: func(_, obj any) { x.set(obj) },
		DeleteFunc: x.remove,
	})
	if err != nil {
		return nil, fmt.Errorf("pinned locations informer: %w", err)
	}
	x.synced = reg.HasSynced
	return x, nil
}

func (x *LocationIndex) set(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Namespace != x.namespace {
		return
	}
	x.mu.Lock()
	x.byName[cm.Name] = cm
	x.mu.Unlock()
}

func (x *LocationIndex) remove(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Namespace != x.namespace {
		return
	}
	x.mu.Lock()
	if cur := x.byName[cm.Name]; cur != nil && cur.UID == cm.UID {
		delete(x.byName, cm.Name)
	}
	x.mu.Unlock()
}

// lookup returns the ConfigMap key names (nil when there is none) and whether the index
// knows: it does once its informer has synced, for keys in its namespace.
func (x *LocationIndex) lookup(key client.ObjectKey) (*corev1.ConfigMap, bool) {
	if x == nil || key.Namespace != x.namespace {
		return nil, false
	}
	if !x.ready.Load() {
		if !x.synced() {
			return nil, false
		}
		x.ready.Store(true)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.byName[key.Name], true
}
