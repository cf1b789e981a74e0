package redisguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
)

// fakeRideOut is a rideOut whose waits pass at once on a fake clock, which
// they advance.
func fakeRideOut(max time.Duration) (*rideOut, *clock.Fake) {
	clk := clock.NewFake(time.Now().Add(time.Hour)) // ahead of real time: contexts with its deadlines stay live
	r := newRideOut(max, nil, nil)
	r.now = clk.Now
	r.after = func(d time.Duration) <-chan time.Time {
		clk.Advance(d)
		ch := make(chan time.Time, 1)
		ch <- clk.Now()
		return ch
	}
	return r, clk
}

var clusterDown = redisErr("CLUSTERDOWN The cluster is down")

func TestNotServing(t *testing.T) {
	for _, reply := range []string{"CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing of slot",
		"LOADING Redis is loading the dataset in memory", "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"READONLY You can't write against a read only replica.",
		"UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"} {
		assert.True(t, notServing(redisErr(reply)), reply)
	}
	for _, err := range []error{nil, redis.Nil, redisErr("MOVED 1 127.0.0.1:7000"), redisErr("WRONGTYPE Operation against a key"),
		redisErr("NOSCRIPT No matching script"), errors.New("CLUSTERDOWN not a reply"), notServingError(clusterDown),
		redisErr("UNBLOCKED client unblocked via CLIENT UNBLOCK")} {
		assert.False(t, notServing(err), "%v", err)
	}
}

func TestRideOutServedAfterRounds(t *testing.T) {
	r, clk := fakeRideOut(15 * time.Second)
	start := clk.Now()
	sends := 0
	err := r.process(context.Background(), clusterDown, func(context.Context) error {
		if sends++; sends < 4 {
			return clusterDown
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 4, sends)
	// Rounds of about 50, 100, 200 and 250ms (the most).
	waited := clk.Now().Sub(start)
	assert.InDelta(t, float64(600*time.Millisecond), float64(waited), float64(120*time.Millisecond))
}

// The end of a CLUSTERDOWN window (a promotion, most often) fetches the
// slot map at once: whole runs when a round after CLUSTERDOWN is served,
// not while the cluster still refuses, and not for the other refusals.
func TestRideOutClusterWholeAgain(t *testing.T) {
	r, _ := fakeRideOut(15 * time.Second)
	wholes := 0
	r.whole = func() { wholes++ }
	refusedTwice := func(reply error) func(context.Context) error {
		sends := 0
		return func(context.Context) error {
			if sends++; sends < 3 {
				return reply
			}
			return nil
		}
	}
	require.NoError(t, r.process(context.Background(), clusterDown, refusedTwice(clusterDown)))
	assert.Equal(t, 1, wholes, "the served round after CLUSTERDOWN, and only it")

	tryAgain := redisErr("TRYAGAIN Multiple keys request during rehashing of slot")
	require.NoError(t, r.process(context.Background(), tryAgain, refusedTwice(tryAgain)))
	assert.Equal(t, 1, wholes, "TRYAGAIN's end says nothing of the slot map's owners")

	short, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	r.max = 100 * time.Millisecond
	err := r.process(short, clusterDown, func(context.Context) error { return clusterDown })
	require.ErrorIs(t, err, ErrNotServing)
	assert.Equal(t, 1, wholes, "a window that outlasted the ride-out is not its end")
}

func TestRideOutGivesUpTyped(t *testing.T) {
	r, clk := fakeRideOut(3 * time.Second)
	start := clk.Now()
	sends := 0
	err := r.process(context.Background(), clusterDown, func(context.Context) error { sends++; return clusterDown })
	require.ErrorIs(t, err, ErrNotServing)
	assert.Contains(t, err.Error(), "CLUSTERDOWN The cluster is down")
	assert.False(t, isRedisReply(err), "the typed error still looks like the reply: go-redis would retry it")
	assert.LessOrEqual(t, clk.Now().Sub(start), 3*time.Second)
	// About 50, 100, 200, then 250ms apart: one command per round.
	assert.GreaterOrEqual(t, sends, 9)
	assert.LessOrEqual(t, sends, 16)
}

func TestRideOutStopsBeforeTheCallersDeadline(t *testing.T) {
	r, clk := fakeRideOut(15 * time.Second)
	start := clk.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(300*time.Millisecond))
	defer cancel()
	sends := 0
	err := r.process(ctx, clusterDown, func(context.Context) error { sends++; return clusterDown })
	require.ErrorIs(t, err, ErrNotServing, "a typed error, before the deadline, not the context's")
	assert.Less(t, clk.Now().Sub(start), 300*time.Millisecond, "waited past the caller's deadline")
	assert.Contains(t, []int{2, 3}, sends, "rounds of about 50, 100 and 200ms, as many as fit")
}

func TestRideOutLeavesOtherErrorsAlone(t *testing.T) {
	r, _ := fakeRideOut(time.Second)
	wrong := redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")
	assert.Equal(t, wrong, r.process(context.Background(), wrong, func(context.Context) error {
		t.Fatal("sent again")
		return nil
	}))
}

// Callers that meet the same refusal at once share the wait: one command
// per round reaches the server until it serves, then each caller's once.
func TestRideOutCallersShareTheWait(t *testing.T) {
	r, _ := fakeRideOut(15 * time.Second)
	release := make(chan time.Time)
	var waiting atomic.Int32
	r.after = func(time.Duration) <-chan time.Time { waiting.Add(1); return release }
	var served atomic.Bool
	var sends atomic.Int32
	send := func(context.Context) error {
		sends.Add(1)
		if served.Load() {
			return nil
		}
		return clusterDown
	}
	const callers = 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() { errs <- r.process(context.Background(), clusterDown, send) })
	}
	// One leader waits on its back-off; the others wait for its round
	// (each follower's timer is the deadline's).
	require.Eventually(t, func() bool { return waiting.Load() == callers }, 5*time.Second, time.Millisecond)
	release <- time.Now() // the leader sends, and is refused again
	require.Eventually(t, func() bool { return waiting.Load() >= 2*callers-1 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, int32(1), sends.Load(), "more than the leader sent during a round")
	served.Store(true)
	release <- time.Now()
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	assert.Equal(t, int32(2+callers-1), sends.Load(), "two rounds of the leader, then each follower once")
}

func TestRideOutBatch(t *testing.T) {
	r, _ := fakeRideOut(15 * time.Second)
	ctx := context.Background()
	get, incr, set := redis.NewStringCmd(ctx, "get", "a"), redis.NewIntCmd(ctx, "incr", "n"), redis.NewStatusCmd(ctx, "set", "b", "1")
	get.SetVal("x")
	incr.SetErr(clusterDown)
	set.SetErr(clusterDown)
	var resent [][]redis.Cmder
	next := func(_ context.Context, cmds []redis.Cmder) error {
		resent = append(resent, cmds)
		for _, cmd := range cmds {
			if len(resent) == 1 && cmd == set {
				cmd.SetErr(clusterDown) // still refused in the first round
			}
		}
		return nil
	}
	err := r.batch(ctx, []redis.Cmder{get, incr, set}, next, clusterDown)
	require.NoError(t, err)
	require.Len(t, resent, 2)
	assert.Equal(t, []redis.Cmder{incr, set}, resent[0], "only the refused commands are sent again")
	assert.Equal(t, []redis.Cmder{set}, resent[1])
	assert.Equal(t, "x", get.Val(), "an answered command keeps its answer")
}

func TestRideOutBatchTypesWhatIsLeft(t *testing.T) {
	r, _ := fakeRideOut(time.Second)
	ctx := context.Background()
	get := redis.NewStringCmd(ctx, "get", "a")
	get.SetErr(clusterDown)
	err := r.batch(ctx, []redis.Cmder{get}, func(_ context.Context, cmds []redis.Cmder) error {
		cmds[0].SetErr(clusterDown)
		return clusterDown
	}, clusterDown)
	require.ErrorIs(t, err, ErrNotServing)
	require.ErrorIs(t, get.Err(), ErrNotServing)
	assert.False(t, isRedisReply(get.Err()))
}

// passedCtx is a context whose deadline has passed, as the caller's does
// when it ends during a wait, while its Deadline still leaves the fake
// clock room for a round.
type passedCtx struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (c passedCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c passedCtx) Done() <-chan struct{}       { return c.done }
func (c passedCtx) Err() error                  { return context.DeadlineExceeded }

// A caller whose deadline passes while it waits for a round, as leader or
// follower, is told ErrNotServing with the refusal, the same answer as when
// no time is left for a round; one that is cancelled gets its context's
// error.
func TestRideOutDeadlineDuringTheWaitIsTyped(t *testing.T) {
	r, clk := fakeRideOut(15 * time.Second)
	never := make(chan time.Time)
	r.after = func(time.Duration) <-chan time.Time { return never }
	done := make(chan struct{})
	close(done)
	passed := passedCtx{Context: context.Background(), deadline: clk.Now().Add(time.Minute), done: done}

	sent := 0
	send := func(context.Context) error { sent++; return nil }
	err := r.process(passed, clusterDown, send)
	require.ErrorIs(t, err, ErrNotServing, "leader")
	assert.Contains(t, err.Error(), "CLUSTERDOWN")

	rd, leader := r.rounds.Join(refusalKind(clusterDown)) // another caller leads the round
	require.True(t, leader)
	err = r.process(passed, clusterDown, send)
	require.ErrorIs(t, err, ErrNotServing, "follower")
	r.rounds.End(refusalKind(clusterDown), rd, false)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	err = r.process(cancelled, clusterDown, send)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrNotServing)
	assert.Zero(t, sent, "a command was sent after its caller's context ended")
}

// A command sent again whose caller's deadline passes before it is
// answered ends in ErrNotServing with the refusal, and says it was the
// deadline; one that may have run keeps ErrOutcomeUnknown.
func TestRideOutDeadlineDuringTheResendIsTyped(t *testing.T) {
	r, clk := fakeRideOut(15 * time.Second)
	done := make(chan struct{})
	close(done)
	passed := passedCtx{Context: context.Background(), deadline: clk.Now().Add(time.Minute), done: done}
	r.after = func(time.Duration) <-chan time.Time { // the round's wait passes; the context is not looked at first
		ch := make(chan time.Time, 1)
		ch <- clk.Now()
		return ch
	}
	err := r.process(passedAfterWait{passed}, clusterDown, func(context.Context) error { return context.DeadlineExceeded })
	require.ErrorIs(t, err, ErrNotServing)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	unknown := &NodeError{Addr: "a:1", Err: ErrOutcomeUnknown}
	err = r.process(passedAfterWait{passed}, clusterDown, func(context.Context) error { return unknown })
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.NotErrorIs(t, err, ErrNotServing)
}

// passedAfterWait is passedCtx whose Done never fires, so that the ride-out
// waits its round and sends, and whose Err says the deadline has passed, as
// it has by the time the resend returns.
type passedAfterWait struct{ passedCtx }

func (passedAfterWait) Done() <-chan struct{} { return nil }

// The same in a batch: a refused command sent again whose caller's deadline
// passes before it is answered ends in ErrNotServing with its refusal, not
// as the bare deadline; one that may have run keeps ErrOutcomeUnknown; a
// command answered before keeps its answer.
func TestRideOutBatchDeadlineDuringTheResendIsTyped(t *testing.T) {
	r, clk := fakeRideOut(15 * time.Second)
	done := make(chan struct{})
	close(done)
	passed := passedAfterWait{passedCtx{Context: context.Background(), deadline: clk.Now().Add(time.Minute), done: done}}
	r.after = func(time.Duration) <-chan time.Time {
		ch := make(chan time.Time, 1)
		ch <- clk.Now()
		return ch
	}
	unknown := &NodeError{Addr: "a:1", Err: ErrOutcomeUnknown}
	get, incr, set := redis.NewStringCmd(passed, "get", "a"), redis.NewIntCmd(passed, "incr", "n"), redis.NewStatusCmd(passed, "set", "b", "1")
	get.SetErr(&NodeError{Addr: "b:1", Err: ErrNodeUnavailable})
	incr.SetErr(clusterDown)
	set.SetErr(clusterDown)
	var resent []redis.Cmder
	err := r.batch(passed, []redis.Cmder{get, incr, set}, func(_ context.Context, cmds []redis.Cmder) error {
		resent = append(resent, cmds...)
		incr.SetErr(context.DeadlineExceeded)
		set.SetErr(unknown)
		return context.DeadlineExceeded
	}, get.Err())
	assert.Equal(t, []redis.Cmder{incr, set}, resent, "the refused commands were sent again once")
	require.ErrorIs(t, incr.Err(), ErrNotServing, "the INCR left unanswered by the deadline")
	require.ErrorIs(t, incr.Err(), context.DeadlineExceeded)
	assert.Contains(t, incr.Err().Error(), "CLUSTERDOWN", "the refusal is quoted")
	require.ErrorIs(t, set.Err(), ErrOutcomeUnknown, "the SET that may have run")
	require.NotErrorIs(t, set.Err(), ErrNotServing)
	require.ErrorIs(t, err, ErrNodeUnavailable, "the batch's error is its first command's")
}
