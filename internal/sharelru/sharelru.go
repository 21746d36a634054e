// Package sharelru is an LRU cache shared by groups, each capped: one tenant adding entry after
// entry evicts only its own. The compaction API keeps its authorization answers and its
// sessions' engines in it.
package sharelru

import (
	"container/list"
	"sync"
	"time"
)

// Cache is an LRU cache whose entries each belong to one group per level (a caller; a
// session and its namespace), where each level caps what one group may hold: an entry added
// to a group at its cap evicts that group's least recently used entry, never another
// group's. Past size entries in all, the least recently used entry of all goes. So one
// caller (one session, one namespace) that adds entry after entry only ever evicts its own,
// until it is one of size/cap groups that are all full.
//
// With idle > 0 an entry not used (Get or Add) for idle is gone: it is dropped when found,
// and expired entries at the cold end are dropped on every Get and Add.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	size  int
	caps  []int
	idle  time.Duration
	now   func() time.Time
	order *list.List // of *entry[K, V], most recently used first
	items map[K]*list.Element
	// groups are, per level, each group's entries (*list.Element of order), most recently
	// used first.
	groups []map[string]*list.List
}

type entry[K comparable, V any] struct {
	key    K
	val    V
	groups []string
	// inGroup is the entry's element in its group's list, per level.
	inGroup []*list.Element
	used    time.Time
}

// New is a cache of at most size entries with a cap per group of each level
// (len(caps) levels); idle 0 keeps entries until they are evicted.
func New[K comparable, V any](size int, idle time.Duration, caps ...int) *Cache[K, V] {
	c := &Cache[K, V]{size: max(size, 1), caps: caps, idle: idle, now: time.Now, order: list.New(), items: map[K]*list.Element{}}
	for range caps {
		c.groups = append(c.groups, map[string]*list.List{})
	}
	return c
}

// Get returns the entry of k and makes it the most recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.expire(now)
	el, ok := c.items[k]
	if !ok {
		var zero V
		return zero, false
	}
	e := el.Value.(*entry[K, V])
	c.touch(el, now)
	return e.val, true
}

// Contains reports whether k has an entry, without using it.
func (c *Cache[K, V]) Contains(k K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[k]
	return ok
}

// Add sets k's entry, in groups (one per level; missing ones are ""). A key that has an
// entry keeps its groups when none are given.
func (c *Cache[K, V]) Add(k K, v V, groups ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.expire(now)
	if el, ok := c.items[k]; ok {
		e := el.Value.(*entry[K, V])
		if len(groups) == 0 || equalGroups(e.groups, c.levels(groups)) {
			e.val = v
			c.touch(el, now)
			return
		}
		c.remove(el)
	}
	groups = c.levels(groups)
	// Make room in each of the entry's groups from the group's own entries first.
	for level, g := range groups {
		if l := c.groups[level][g]; l != nil && l.Len() >= c.caps[level] {
			c.remove(l.Back().Value.(*list.Element))
		}
	}
	for c.order.Len() >= c.size {
		c.remove(c.order.Back())
	}
	e := &entry[K, V]{key: k, val: v, groups: groups, inGroup: make([]*list.Element, len(groups)), used: now}
	el := c.order.PushFront(e)
	c.items[k] = el
	for level, g := range groups {
		l := c.groups[level][g]
		if l == nil {
			l = list.New()
			c.groups[level][g] = l
		}
		e.inGroup[level] = l.PushFront(el)
	}
}

// Remove drops k's entry.
func (c *Cache[K, V]) Remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		c.remove(el)
	}
}

// RemoveGroup drops every entry of group g of level (a deleted session's engines).
func (c *Cache[K, V]) RemoveGroup(level int, g string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if level >= len(c.groups) {
		return
	}
	if l := c.groups[level][g]; l != nil {
		for l.Len() > 0 {
			c.remove(l.Front().Value.(*list.Element))
		}
	}
}

// Len is the number of entries.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// GroupLen is the number of entries of group g of level.
func (c *Cache[K, V]) GroupLen(level int, g string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.groups[level][g]; l != nil {
		return l.Len()
	}
	return 0
}

// Keys are the keys, least recently used first.
func (c *Cache[K, V]) Keys() []K {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]K, 0, c.order.Len())
	for el := c.order.Back(); el != nil; el = el.Prev() {
		keys = append(keys, el.Value.(*entry[K, V]).key)
	}
	return keys
}

func (c *Cache[K, V]) levels(groups []string) []string {
	out := make([]string, len(c.caps))
	copy(out, groups)
	return out
}

func equalGroups(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (c *Cache[K, V]) touch(el *list.Element, now time.Time) {
	e := el.Value.(*entry[K, V])
	e.used = now
	c.order.MoveToFront(el)
	for level, g := range e.groups {
		c.groups[level][g].MoveToFront(e.inGroup[level])
	}
}

func (c *Cache[K, V]) remove(el *list.Element) {
	e := el.Value.(*entry[K, V])
	c.order.Remove(el)
	delete(c.items, e.key)
	for level, g := range e.groups {
		l := c.groups[level][g]
		l.Remove(e.inGroup[level])
		if l.Len() == 0 {
			delete(c.groups[level], g)
		}
	}
}

// expire drops the entries not used for idle: they are the least recently used ones.
func (c *Cache[K, V]) expire(now time.Time) {
	if c.idle <= 0 {
		return
	}
	for el := c.order.Back(); el != nil && now.Sub(el.Value.(*entry[K, V]).used) >= c.idle; el = c.order.Back() {
		c.remove(el)
	}
}
