package redisproc

import (
	"errors"
	"fmt"
	"time"
)

// ReadyTimeout bounds every wait this package performs: server start-up,
// replication links, sentinel discovery and cluster convergence. It is far
// above what a healthy run needs (well under a second for most waits) because
// CI machines are small and shared; a wait only takes this long when
// something is broken.
const ReadyTimeout = 30 * time.Second

// Polling starts fast, since most conditions hold within milliseconds, and
// backs off so that slow ones (gossip, failure detection) do not flood the
// servers being watched.
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 100 * time.Millisecond
)

// WaitFor calls cond until it returns nil, and returns an error if that has
// not happened within timeout. The error names what was awaited and the last
// error cond returned, which is usually the most useful clue.
func WaitFor(timeout time.Duration, what string, cond func() error) error {
	if err := poll(timeout, cond); err != nil {
		return fmt.Errorf("redisproc: waiting for %s: %w", what, err)
	}
	return nil
}

// stopPolling wraps an error that no amount of waiting will fix, such as the
// server process having exited; poll returns it at once.
type stopPolling struct{ err error }

func (e *stopPolling) Error() string { return e.err.Error() }

func permanent(err error) error { return &stopPolling{err: err} }

// poll runs cond until it succeeds, returns a permanent error, or timeout
// passes; it then returns nil, the unwrapped permanent error, or the last
// error annotated with the timeout.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	delay := pollFirst
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if stop, ok := errors.AsType[*stopPolling](err); ok {
			return stop.err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still not done after %v: %w", timeout, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, pollMax)
	}
}
