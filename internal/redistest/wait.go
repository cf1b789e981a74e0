package redistest

import (
	"testing"
	"time"

	"github.com/redisguard/redisguard/internal/redisproc"
)

// ReadyTimeout bounds every wait this package performs: server start-up,
// replication links, sentinel discovery and cluster convergence. It is far
// above what a healthy run needs (well under a second for most waits) because
// CI machines are small and shared; a wait only takes this long when
// something is broken.
const ReadyTimeout = redisproc.ReadyTimeout

// WaitFor calls cond until it returns nil and fails the test if that has not
// happened within timeout. The failure message names what was awaited and
// the last error cond returned, which is usually the most useful clue.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := redisproc.WaitFor(timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}
