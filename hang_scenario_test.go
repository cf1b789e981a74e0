package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The hung-node scenarios: a node stops answering (SIGSTOP), and callers
// carry what services carry, deadlines of their own shorter than
// ReadTimeout, or none. Every redisguard client here runs the default
// Config; go-redis alone runs its defaults beside it in the same test.

// runLoadDeadline is runLoad with every call bounded by the caller's own
// deadline, as an HTTP handler's context bounds it: worker w's calls get
// deadline(w).
func runLoadDeadline(workers int, d time.Duration, deadline func(w int) time.Duration, fn func(ctx context.Context, rng *rand.Rand) (int, error)) *opRecord {
	rec := &opRecord{start: time.Now(), per: make([][]op, workers)}
	stop := rec.start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				t0 := time.Now()
				if !t0.Before(stop) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline(w))
				g, err := fn(ctx, rng)
				cancel()
				rec.per[w] = append(rec.per[w], op{at: t0.Sub(rec.start), lat: time.Since(t0), group: g, err: err})
			}
		})
	}
	wg.Wait()
	return rec
}

// runPaced runs workers that each start an operation every interval, on a
// fixed schedule: a worker held up runs the operations it missed at once,
// and each one's latency counts from its scheduled start, so a stalled
// caller is counted for the whole time it stalled.
func runPaced(workers int, interval, d time.Duration, fn func(ctx context.Context, rng *rand.Rand, seq int) (int, error)) *opRecord {
	rec := &opRecord{start: time.Now(), per: make([][]op, workers)}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			// Spread the workers' schedules over one interval.
			first := time.Duration(w) * interval / time.Duration(workers)
			for i := 0; ; i++ {
				at := first + time.Duration(i)*interval
				if at >= d {
					return
				}
				if wait := time.Until(rec.start.Add(at)); wait > 0 {
					time.Sleep(wait)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				g, err := fn(ctx, rng, w<<32|i)
				cancel()
				rec.per[w] = append(rec.per[w], op{at: at, lat: time.Since(rec.start.Add(at)), group: g, err: err})
			}
		})
	}
	wg.Wait()
	return rec
}

// ignoreNil is err, with the nil reply of a missing key taken for the
// answer it is.
func ignoreNil(err error) error {
	if err == redis.Nil {
		return nil
	}
	return err
}

// opened returns when addr's breaker first opened at or after from, by the
// events in l; zero if it did not.
func (l *eventLog) opened(addr string, from time.Time) (time.Time, Event) {
	for _, e := range l.find(EventBreakerOpened, func(e Event) bool { return e.Addr == addr && !e.Time.Before(from) }) {
		return e.Time, e
	}
	return time.Time{}, Event{}
}

// One master of three hangs for 6s under 64 callers that each read keys of
// every slot with a 200ms deadline of their own: shorter than ReadTimeout,
// so no call ever times out by it. The hung master's breaker must open
// from its silence alone, and the two thirds of the keys on healthy
// masters stay served.
func TestScenarioHungMasterCallerDeadlines(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario")
	}
	hungMasterUnderDeadlines(t, "200ms", func(int) time.Duration { return 200 * time.Millisecond })
}

// The same hang, with the callers' deadlines spread over what services
// carry: worker w of 64 gives up after 100ms + w*400ms/63, so some callers
// wait 100ms and others 500ms.
func TestScenarioHungMasterSpreadDeadlines(t *testing.T) {
	fullOnly(t)
	hungMasterUnderDeadlines(t, "100-500ms", func(w int) time.Duration {
		return 100*time.Millisecond + time.Duration(w)*400*time.Millisecond/63
	})
}

// hungMasterUnderDeadlines hangs one master of three under 64 callers whose
// calls get deadline(w), go-redis alone and redisguard in turn.
func hungMasterUnderDeadlines(t *testing.T, label string, deadline func(w int) time.Duration) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 20 * time.Second})
	keys := clusterKeys(t, cl, 300)
	const callers = 64
	shortest := deadline(0)
	for w := range callers {
		shortest = min(shortest, deadline(w))
	}
	warm, hang, after := 2*time.Second, pick(6*time.Second, 3*time.Second), 2*time.Second
	hung := cl.Masters[0]

	type result struct {
		name             string
		base, during     float64 // answered calls per second, every key
		waitedOut        int     // calls that spent their whole deadline, during the hang
		healthyErrs      int
		openedAfter      time.Duration // -1: never
		recoveredAfter   time.Duration // first answer of the hung master's keys after it resumed; -1: none
		errs             string
		opensAfterResume int
	}
	run := func(name string, c redis.UniversalClient, events *eventLog) result {
		var rec *opRecord
		done := make(chan struct{})
		go func() {
			defer close(done)
			rec = runLoadDeadline(callers, warm+hang+after, deadline, func(ctx context.Context, rng *rand.Rand) (int, error) {
				g := rng.IntN(3)
				return g, c.Get(ctx, keys[g][rng.IntN(len(keys[g]))]).Err()
			})
		}()
		time.Sleep(warm)
		hung.Pause(t)
		pausedAt := time.Now()
		time.Sleep(hang)
		hung.Resume(t)
		<-done
		start := pausedAt.Sub(rec.start)
		r := result{name: name, openedAfter: -1, recoveredAfter: -1}
		r.base = rec.rate(-1, 500*time.Millisecond, start)
		r.during = rec.rate(-1, start, start+hang)
		r.waitedOut = len(rec.filter(-1, start, start+hang, func(o op) bool {
			return errors.Is(o.err, context.DeadlineExceeded) && o.lat >= shortest-5*time.Millisecond
		}))
		r.healthyErrs = len(rec.filter(1, 0, time.Hour, errOps)) + len(rec.filter(2, 0, time.Hour, errOps))
		for _, o := range rec.filter(0, start+hang, time.Hour, okOps) {
			if d := o.at + o.lat - (start + hang); r.recoveredAfter < 0 || d < r.recoveredAfter {
				r.recoveredAfter = d
			}
		}
		r.errs = errorKinds(rec.filter(-1, 0, time.Hour, errOps))
		if events != nil {
			if at, _ := events.opened(hung.Addr, pausedAt); !at.IsZero() {
				r.openedAfter = at.Sub(pausedAt)
			}
			r.opensAfterResume = len(events.find(EventBreakerOpened, func(e Event) bool {
				return e.Time.After(pausedAt.Add(hang + 100*time.Millisecond))
			}))
		}
		return r
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	rs := run("go-redis", stock, nil)
	require.NoError(t, stock.Close())
	cl.WaitHealthy(t)

	events := &eventLog{}
	guard := newTestClient(t, Config{Addrs: cl.Addrs(), OnEvent: events.onEvent})
	rg := run("redisguard", guard, events)

	row := func(r result) []string {
		opened, recovered := "never", "never"
		if r.openedAfter >= 0 {
			opened = fmtDur(r.openedAfter)
		}
		if r.recoveredAfter >= 0 {
			recovered = fmtDur(r.recoveredAfter)
		}
		return []string{r.name, fmtRate(r.base), fmtRate(r.during), fmtPct(r.during / r.base), strconv.Itoa(r.waitedOut),
			opened, strconv.Itoa(r.healthyErrs), recovered}
	}
	table(t, fmt.Sprintf("hung master: %d callers with %s deadlines, default Config, hang %s", callers, label, hang),
		[]string{"client", "answered before", "answered during hang", "kept", "waited out their deadline", "breaker opened after",
			"healthy-key errors", "first answer after resume"},
		row(rs), row(rg))
	t.Logf("go-redis errors: %s", rs.errs)
	t.Logf("redisguard errors: %s", rg.errs)

	require.GreaterOrEqual(t, rg.openedAfter, time.Duration(0), "the hung master's breaker never opened")
	assert.LessOrEqual(t, rg.openedAfter, pick(time.Second, 1500*time.Millisecond), "the hung master was seen too late")
	assert.GreaterOrEqual(t, rg.during/rg.base, pick(0.5, 0.3), "the calls answered during the hang fell too far")
	assert.Less(t, rg.waitedOut, rs.waitedOut, "no fewer callers waited out their deadline than with go-redis alone")
	assert.Zero(t, rg.healthyErrs, "calls for healthy masters failed")
	require.GreaterOrEqual(t, rg.recoveredAfter, time.Duration(0), "the hung master never served again")
	assert.LessOrEqual(t, rg.recoveredAfter, pick(500*time.Millisecond, 1500*time.Millisecond), "the master came back too slowly")
	if rs.recoveredAfter >= 0 {
		assert.LessOrEqual(t, rg.recoveredAfter, rs.recoveredAfter+pick(100*time.Millisecond, 500*time.Millisecond),
			"recovered later than go-redis alone")
	}
	assert.Zero(t, rg.opensAfterResume, "a breaker opened after the master resumed")
}

// No false openings: a healthy node whose callers give up after 1ms all the
// time, a node whose p99 rises past 50ms under load, and
// a node busy with one 300ms command. None of them is hung.
func TestScenarioHangWatchOpensNoHealthyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("scenario")
	}
	srv := redistest.StartServer(t)
	ctx := testCtx(t, time.Minute)

	t.Run("callers with 1ms deadlines", func(t *testing.T) {
		events := &eventLog{}
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, OnEvent: events.onEvent})
		callers := pick(512, 128)
		// A running service's pool is warm: a second of ordinary traffic
		// first, then every caller gives up after 1ms.
		runLoad(64, time.Second, func(ctx context.Context, rng *rand.Rand) (int, error) {
			return 0, ignoreNil(c.Get(ctx, "k"+strconv.Itoa(rng.IntN(100))).Err())
		})
		rec := runLoadDeadline(callers, pick(5*time.Second, 2*time.Second), func(int) time.Duration { return time.Millisecond }, func(ctx context.Context, rng *rand.Rand) (int, error) {
			return 0, ignoreNil(c.Get(ctx, "k"+strconv.Itoa(rng.IntN(100))).Err())
		})
		all := rec.filter(-1, 0, time.Hour, nil)
		expired := rec.filter(-1, 0, time.Hour, func(o op) bool { return errors.Is(o.err, context.DeadlineExceeded) })
		t.Logf("%d callers: %d calls, %d ended by their 1ms deadline", callers, len(all), len(expired))
		assert.Empty(t, events.find(EventBreakerOpened, func(Event) bool { return true }), "a healthy node's breaker opened")
		assert.NotEmpty(t, expired, "no deadline expired: the test did not test what it says")
	})

	t.Run("a slowed node", func(t *testing.T) {
		events := &eventLog{}
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, OnEvent: events.onEvent})
		// Paused 60ms of every 100ms: half the calls wait, the p99 rises
		// past 50ms.
		stop := pauseEvery(t, srv, 60*time.Millisecond, 100*time.Millisecond)
		rec := runLoad(32, pick(5*time.Second, 2*time.Second), func(ctx context.Context, rng *rand.Rand) (int, error) {
			return 0, ignoreNil(c.Get(ctx, "k"+strconv.Itoa(rng.IntN(100))).Err())
		})
		stop()
		ops := rec.filter(-1, 0, time.Hour, nil)
		t.Logf("%d calls on a slowed node, p50 %s, p99 %s", len(ops), fmtDur(percentile(ops, 50)), fmtDur(percentile(ops, 99)))
		assert.GreaterOrEqual(t, percentile(ops, 99), 50*time.Millisecond, "the node was not slowed")
		assert.Empty(t, events.find(EventBreakerOpened, func(Event) bool { return true }), "a slow node's breaker opened")
		assert.Empty(t, rec.filter(-1, 0, time.Hour, errOps))
	})

	t.Run("one 300ms command", func(t *testing.T) {
		events := &eventLog{}
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, OnEvent: events.onEvent})
		var sleepEnded time.Time
		done := make(chan struct{})
		var rec *opRecord
		go func() {
			defer close(done)
			rec = runLoad(32, 2*time.Second, func(ctx context.Context, rng *rand.Rand) (int, error) {
				return 0, ignoreNil(c.Get(ctx, "k"+strconv.Itoa(rng.IntN(100))).Err())
			})
		}()
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, srv.Admin().Do(ctx, "debug", "sleep", "0.3").Err())
		sleepEnded = time.Now()
		<-done
		end := sleepEnded.Sub(rec.start)
		var resumed time.Duration = -1
		for _, o := range rec.filter(-1, 0, time.Hour, okOps) {
			if fin := o.at + o.lat; fin >= end && (resumed < 0 || fin-end < resumed) {
				resumed = fin - end
			}
		}
		errs := rec.filter(-1, 0, time.Hour, errOps)
		t.Logf("after DEBUG SLEEP 0.3: first answer %s after the sleep ended; %d errors: %s", fmtDur(resumed), len(errs), errorKinds(errs))
		assert.Empty(t, events.find(EventBreakerOpened, func(Event) bool { return true }), "one long command opened the breaker")
		require.GreaterOrEqual(t, resumed, time.Duration(0))
		assert.LessOrEqual(t, resumed, 100*time.Millisecond, "the node did not serve again within 100ms of answering")
		assert.Empty(t, errs)
	})
}
