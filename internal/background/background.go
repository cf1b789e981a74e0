// Package background owns goroutines that outlive the call that starts
// them: each runs with a context that Close cancels, and Close returns once
// every one of them has.
package background

import (
	"context"
	"sync"
)

// A Group owns background goroutines. A zero Group is valid; it must not be
// copied after first use.
type Group struct {
	mu     sync.Mutex
	ctx    context.Context    // guarded by mu; created on first use, cancelled by Close
	cancel context.CancelFunc // guarded by mu
	closed bool               // guarded by mu; no goroutine starts once set
	// wg counts the running goroutines. Add happens only under mu while
	// closed is unset, so the Wait in Close, which follows setting it,
	// counts every goroutine that will ever start.
	wg sync.WaitGroup
}

// Go runs f in a new goroutine, with the group's context, unless Close has
// been called. It reports whether f runs; a caller that marked the work as
// started undoes that when it does not.
func (g *Group) Go(f func(ctx context.Context)) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	ctx := g.contextLocked()
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		f(ctx)
	}()
	return true
}

// Context returns the context the group's goroutines run with, done once
// Close is called: work on a caller's own goroutine that must end with the
// group merges it with the caller's.
func (g *Group) Context() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.contextLocked()
}

func (g *Group) contextLocked() context.Context {
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	return g.ctx
}

// Cancel refuses every later Go and cancels the group's context, without
// waiting: an owner whose goroutines block on something it closes (a
// connection) cancels first, so that they take what follows for the end
// and not a failure, closes it, and then calls Close. It may be called more
// than once.
func (g *Group) Cancel() {
	g.mu.Lock()
	g.closed = true
	g.contextLocked()
	cancel := g.cancel
	g.mu.Unlock()
	cancel()
}

// Close refuses every later Go, cancels the group's context and waits for
// the goroutines to return. It may be called more than once, from any
// goroutine but the group's own (one would wait for itself).
func (g *Group) Close() {
	g.Cancel()
	g.wg.Wait()
}
