package redisguard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

func TestParseReplicationLag(t *testing.T) {
	for _, tc := range []struct {
		name string
		info string
		want time.Duration
		ok   bool
	}{
		{"link up", "# Replication\r\nrole:slave\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:2\r\nmaster_sync_in_progress:0\r\n", 2 * time.Second, true},
		{"link down", "role:slave\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\nmaster_link_down_since_seconds:7\r\n", 7 * time.Second, true},
		{"link down, never up", "role:slave\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\nmaster_link_down_since_seconds:-1\r\n", 0, false},
		{"syncing", "role:slave\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:0\r\nmaster_sync_in_progress:1\r\n", 0, false},
		{"a master", "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n", 0, false},
		{"garbage", "role:slave\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:x\r\n", 0, false},
		{"empty", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseReplicationLag(tc.info)
			if !tc.ok {
				assert.ErrorIs(t, err, errNotServing)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A real replica's INFO replication parses, and a replica cut off from its
// master reports the time since.
func TestParseReplicationLagOfRealReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	primary := redistest.StartServer(t)
	replica := redistest.StartReplica(t, primary)
	ctx := testCtx(t, 10*time.Second)
	info, err := replica.Admin().Info(ctx, "replication").Result()
	require.NoError(t, err)
	lag, err := parseReplicationLag(info)
	require.NoError(t, err)
	assert.LessOrEqual(t, lag, 10*time.Second) // repl-ping-replica-period
	primary.Kill(t)
	redistest.WaitFor(t, 10*time.Second, "the replica to report its link down for 1s", func() error {
		info, err := replica.Admin().Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if lag, err := parseReplicationLag(info); err != nil || lag < time.Second {
			return errors.New("link not down for a second yet")
		}
		return nil
	})
}

// lagFixture is a lagTracker on a fake clock whose polls block until the
// test answers them.
type lagFixture struct {
	tr      *lagTracker
	clk     *clock.Fake
	answers chan lagAnswer
	mu      sync.Mutex
	polls   int
}

type lagAnswer struct {
	lag time.Duration
	err error
}

func newLagFixture(t *testing.T, bound time.Duration) *lagFixture {
	f := &lagFixture{clk: clock.NewFake(time.Unix(1000, 0)), answers: make(chan lagAnswer, 1)}
	f.tr = newLagTracker(f.clk, bound, time.Minute, func(ctx context.Context, addr string) (time.Duration, error) {
		f.mu.Lock()
		f.polls++
		f.mu.Unlock()
		select {
		case a := <-f.answers:
			return a.lag, a.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	t.Cleanup(f.tr.close)
	return f
}

func (f *lagFixture) pollCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls
}

// settle waits until the poll in flight for addr, if any, has ended.
func (f *lagFixture) settle(addr string) {
	s := f.tr.state(addr)
	s.mu.Lock()
	ch := s.inFlight
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func TestLagTracker(t *testing.T) {
	ctx := context.Background()
	t.Run("the first read waits for an answer", func(t *testing.T) {
		f := newLagFixture(t, time.Second)
		f.answers <- lagAnswer{lag: 0}
		assert.True(t, f.tr.fresh(ctx, "r:1"))
		assert.Equal(t, 1, f.pollCount())
	})
	t.Run("the answer ages until the next one", func(t *testing.T) {
		f := newLagFixture(t, time.Second)
		f.answers <- lagAnswer{lag: 0}
		require.True(t, f.tr.fresh(ctx, "r:1"))
		f.clk.Advance(900 * time.Millisecond)
		assert.True(t, f.tr.fresh(ctx, "r:1"), "0 + 0.9s is within 1s")
		assert.Equal(t, 1, f.pollCount(), "polled again before a second passed")
		f.clk.Advance(200 * time.Millisecond)
		f.answers <- lagAnswer{lag: 2 * time.Second}
		assert.False(t, f.tr.fresh(ctx, "r:1"), "0 + 1.1s is past 1s")
		f.settle("r:1")
		assert.Equal(t, 2, f.pollCount(), "a read after a second polls in the background")
		assert.False(t, f.tr.fresh(ctx, "r:1"), "the new answer: 2s behind")
	})
	t.Run("an answer read late is aged from when its poll was sent", func(t *testing.T) {
		f := newLagFixture(t, time.Second)
		f.answers <- lagAnswer{lag: 0}
		require.True(t, f.tr.fresh(ctx, "r:1"))
		f.clk.Advance(time.Second + 100*time.Millisecond)
		assert.False(t, f.tr.fresh(ctx, "r:1"), "0 + 1.1s is past 1s") // polls again, in the background
		// The replica answers 0 at once, but the answer is read 3s later.
		f.clk.Advance(3 * time.Second)
		f.answers <- lagAnswer{lag: 0}
		f.settle("r:1")
		assert.False(t, f.tr.fresh(ctx, "r:1"), "a count taken 3s ago is not 0 now")
	})
	t.Run("a failed poll rules the replica out", func(t *testing.T) {
		f := newLagFixture(t, time.Minute)
		f.answers <- lagAnswer{err: errNotServing}
		assert.False(t, f.tr.fresh(ctx, "r:1"))
		assert.False(t, f.tr.fresh(ctx, "r:1"), "no new poll within a second")
		assert.Equal(t, 1, f.pollCount())
	})
	t.Run("an answer too old is waited for again", func(t *testing.T) {
		f := newLagFixture(t, time.Minute)
		f.answers <- lagAnswer{lag: 0}
		require.True(t, f.tr.fresh(ctx, "r:1"))
		f.clk.Advance(lagValidFor + time.Second)
		f.answers <- lagAnswer{lag: time.Second}
		assert.True(t, f.tr.fresh(ctx, "r:1"))
		assert.Equal(t, 2, f.pollCount())
	})
	t.Run("a waiting read honours its context", func(t *testing.T) {
		f := newLagFixture(t, time.Minute)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		assert.False(t, f.tr.fresh(cctx, "r:1"))
	})
	t.Run("close stops the poll in flight", func(t *testing.T) {
		f := newLagFixture(t, time.Minute)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		f.tr.fresh(cctx, "r:1") // leaves a poll blocked on answers
		f.tr.close()
		assert.False(t, f.tr.fresh(ctx, "r:1"), "no poll after close")
	})
}
