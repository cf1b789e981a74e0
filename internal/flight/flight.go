// Package flight shares one call among the concurrent callers that ask for
// it, as x/sync's singleflight does, for callers that must each be able to
// stop waiting: the caller that starts a call (its leader) makes it on its
// own goroutine, with its own context, and the others wait for it as they
// choose, on a context, a timer or a deadline.
package flight

import "sync"

// A Group holds the calls in flight, one per key. A zero Group is valid; it
// must not be copied after first use.
type Group[K comparable, V any] struct {
	mu    sync.Mutex
	calls map[K]*Call[V] // guarded by mu; created on first use
}

// A Call is one call in flight, ended by its leader with Group.End.
type Call[V any] struct {
	done chan struct{}
	val  V // written once, before done is closed
}

// Join returns the call in flight for key and false, or starts one and
// returns it and true: the caller leads it, and must End it.
func (g *Group[K, V]) Join(key K) (*Call[V], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[K]*Call[V])
	}
	c := &Call[V]{done: make(chan struct{})}
	g.calls[key] = c
	return c, true
}

// End ends c, the call its leader started for key, with v, and wakes the
// callers waiting for it. The next Join for key starts a new call.
func (g *Group[K, V]) End(key K, c *Call[V], v V) {
	g.mu.Lock()
	if g.calls[key] == c {
		delete(g.calls, key)
	}
	g.mu.Unlock()
	c.val = v
	close(c.done)
}

// Done is closed once c has ended.
func (c *Call[V]) Done() <-chan struct{} { return c.done }

// Val returns what c ended with. Only once Done is closed.
func (c *Call[V]) Val() V { return c.val }
