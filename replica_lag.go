package redisguard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/clock"
)

// How often a replica's lag is asked for, and how long an answer counts.
// An answer older than lagValidFor says nothing: the next read that asks
// waits for a fresh one.
const (
	lagPollInterval = time.Second
	lagValidFor     = 3 * time.Second
)

// lagTracker knows how far each replica lags behind its master, by asking
// the replica (INFO replication) when a read asks for it: at most once per
// lagPollInterval per replica, and never for a replica no read wants. It
// runs one goroutine per poll in flight, owned and stopped by close.
type lagTracker struct {
	clock   clock.Clock
	maxLag  time.Duration // Config.MaxReplicaStaleness; > 0
	timeout time.Duration // bound of one poll
	// poll asks addr how long ago it last heard from its master; an error
	// means the replica must not serve reads (see parseReplicationLag).
	poll func(ctx context.Context, addr string) (time.Duration, error)

	bg background.Group // the polls in flight; closed by close

	mu   sync.Mutex
	lags map[string]*lagState // guarded by mu; entries are never removed
}

// lagState is one replica's last answer.
type lagState struct {
	mu       sync.Mutex
	at       time.Time     // guarded by mu; when the last answered poll was sent; zero before the first
	lag      time.Duration // guarded by mu; its answer; negative: the replica must not serve
	started  time.Time     // guarded by mu; when the last poll started
	inFlight chan struct{} // guarded by mu; closed when the poll in flight ends; nil if none
}

func newLagTracker(clk clock.Clock, maxLag, timeout time.Duration, poll func(context.Context, string) (time.Duration, error)) *lagTracker {
	return &lagTracker{clock: clk, maxLag: maxLag, timeout: timeout, poll: poll, lags: make(map[string]*lagState)}
}

// fresh reports whether addr's last contact with its master is recent
// enough for it to serve a read. Without a valid answer it waits for one,
// at most until ctx is done; otherwise it answers at once and, once a
// second, refreshes the answer in the background. The lag is the replica's
// answer plus the time since its poll was sent: it only grows until the
// next answer.
func (t *lagTracker) fresh(ctx context.Context, addr string) bool {
	s := t.state(addr)
	now := t.clock.Now()
	s.mu.Lock()
	if s.at.IsZero() || now.Sub(s.at) > lagValidFor {
		wait := s.inFlight
		if wait == nil {
			wait = t.startLocked(s, addr, now)
		}
		s.mu.Unlock()
		if wait == nil {
			return false // closed, or polled less than a second ago without an answer
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
		now = t.clock.Now()
		s.mu.Lock()
		if s.at.IsZero() || now.Sub(s.at) > lagValidFor {
			s.mu.Unlock()
			return false
		}
	} else if s.inFlight == nil {
		t.startLocked(s, addr, now)
	}
	ok := s.lag >= 0 && s.lag+now.Sub(s.at) <= t.maxLag
	s.mu.Unlock()
	return ok
}

func (t *lagTracker) state(addr string) *lagState {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.lags[addr]
	if !ok {
		s = &lagState{}
		t.lags[addr] = s
	}
	return s
}

// startLocked starts a poll of addr unless one started less than
// lagPollInterval ago or the tracker is closed, and returns the channel its
// end closes, or nil. s.mu is held.
func (t *lagTracker) startLocked(s *lagState, addr string, now time.Time) chan struct{} {
	if !s.started.IsZero() && now.Sub(s.started) < lagPollInterval {
		return nil
	}
	done := make(chan struct{})
	started := t.bg.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, t.timeout)
		lag, err := t.poll(ctx, addr)
		cancel()
		if err != nil {
			lag = -1
		}
		// The answer is aged from when the poll was sent, not from when
		// its reply was read: the replica's count was taken in between,
		// and a reply read late (a starved process) must not make an old
		// count look new.
		s.mu.Lock() // after the caller's startLocked has recorded the poll
		s.at, s.lag, s.inFlight = now, lag, nil
		s.mu.Unlock()
		close(done)
	})
	if !started {
		return nil
	}
	s.started, s.inFlight = now, done
	return done
}

// close stops the polls in flight and waits for them.
func (t *lagTracker) close() { t.bg.Close() }

// errNotServing is why a replica's INFO replication rules it out.
var errNotServing = errors.New("replica is not serving its master's data")

// parseReplicationLag reads INFO replication's answer: how long ago the
// replica last heard from its master (master_last_io_seconds_ago), or,
// once the link is down, how long it has been down
// (master_link_down_since_seconds). A server that is no replica, or that is
// still loading its master's data set, is not serving; so is a broken link
// whose age the server does not say.
func parseReplicationLag(info string) (time.Duration, error) {
	fields := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if fields["role"] != "slave" {
		return 0, errNotServing
	}
	if fields["master_sync_in_progress"] == "1" {
		return 0, errNotServing
	}
	key := "master_last_io_seconds_ago"
	if fields["master_link_status"] != "up" {
		key = "master_link_down_since_seconds"
	}
	n, err := strconv.ParseInt(fields[key], 10, 64)
	if err != nil || n < 0 {
		return 0, errNotServing
	}
	return time.Duration(n) * time.Second, nil
}
