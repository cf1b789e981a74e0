package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// tick is the resolution of everything the demo records: completions and
// the time callers spend waiting are counted per tick.
const tick = 100 * time.Millisecond

// stuckAfter is how long a caller may wait in one call before it counts as
// stuck: healthy calls take well under a millisecond, and even on a loaded
// machine far less than this.
const stuckAfter = 100 * time.Millisecond

// recorder collects what one side's callers experienced. Workers report
// each call as it ends; the table also looks at the calls still in flight.
type recorder struct {
	start time.Time

	// inCall[w] is the unix ns at which worker w's current call began, or 0
	// between calls. Written by worker w, read by the table.
	inCall []atomic.Int64

	mu    sync.Mutex
	ticks []tickStats // guarded by mu; index = time since start / tick
	calls []call      // guarded by mu; every call, for the verdict
}

// tickStats is what happened within one tick.
type tickStats struct {
	ok, failed int             // calls that ended in the tick
	lat        []time.Duration // their latencies, for percentiles
	// stuck is the time callers spent stuck during the tick (inside a call,
	// past its first stuckAfter), summed over callers.
	stuck time.Duration
}

// stuckCallers is the average number of stuck callers during the tick.
func (t tickStats) stuckCallers() float64 { return float64(t.stuck) / float64(tick) }

// call is one finished call.
type call struct {
	start, end time.Duration // since the recorder's start
	group      int           // keyGroup of the key it touched
	err        error
}

func (c call) lat() time.Duration { return c.end - c.start }

func newRecorder(workers int, start time.Time) *recorder {
	return &recorder{start: start, inCall: make([]atomic.Int64, workers)}
}

// add records one finished call.
func (r *recorder) add(start, end time.Time, group int, err error) {
	c := call{start: start.Sub(r.start), end: end.Sub(r.start), group: group, err: err}
	last := int(c.end / tick)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grow(last)
	t := &r.ticks[last]
	if err == nil {
		t.ok++
	} else {
		t.failed++
	}
	t.lat = append(t.lat, c.lat())
	for i := int((c.start + stuckAfter) / tick); i <= last; i++ {
		r.ticks[i].stuck += overlap(c.start+stuckAfter, c.end, time.Duration(i)*tick, time.Duration(i+1)*tick)
	}
	r.calls = append(r.calls, c)
}

// grow makes sure tick i exists. r.mu must be held.
func (r *recorder) grow(i int) {
	for len(r.ticks) <= i {
		r.ticks = append(r.ticks, tickStats{})
	}
}

// overlap is the length of [a0, a1) ∩ [b0, b1).
func overlap(a0, a1, b0, b1 time.Duration) time.Duration {
	return max(min(a1, b1)-max(a0, b0), 0)
}

// window sums [from, to) for the table, as seen at now: the calls that
// ended in it, their p99 latency, and the average number of stuck callers,
// counting the calls still in flight up to now.
func (r *recorder) window(from, to time.Duration, now time.Time) (ok, failed int, p99 time.Duration, stuck float64) {
	var stuckFor time.Duration
	at := now.Sub(r.start)
	for i := range r.inCall {
		if began := r.inCall[i].Load(); began != 0 {
			stuckFor += overlap(time.Unix(0, began).Sub(r.start)+stuckAfter, at, from, to)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var lat []time.Duration
	for i := int(from / tick); i < min(int(to/tick), len(r.ticks)); i++ {
		ok += r.ticks[i].ok
		failed += r.ticks[i].failed
		lat = append(lat, r.ticks[i].lat...)
		stuckFor += r.ticks[i].stuck
	}
	return ok, failed, percentile(lat, 99), float64(stuckFor) / float64(to-from)
}

// snapshot copies what the report and the chart need.
func (r *recorder) snapshot() ([]tickStats, []call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ticks), slices.Clone(r.calls)
}

// percentile returns the p-th percentile (0-100) of lat, or 0 for none. It
// sorts lat.
func percentile(lat []time.Duration, p float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[int(float64(len(lat)-1)*p/100)]
}

// keyspace is the set of keys the workload reads, grouped by whether the
// fault hits them: group 0 is on the sick node, group 1 on the others.
type keyspace [2][]string

const (
	groupSick    = 0
	groupHealthy = 1
)

func (k *keyspace) pick(rng *rand.Rand) (string, int) {
	n0, n1 := len(k[0]), len(k[1])
	i := rng.IntN(n0 + n1)
	if i < n0 {
		return k[0][i], groupSick
	}
	return k[1][i-n0], groupHealthy
}

// workload is the demo's service: workers goroutines, each handling one
// request every interval, and each request making one GET. A worker stuck in
// a call handles nothing else meanwhile, which is the point.
type workload struct {
	workers  int
	interval time.Duration
	keys     *keyspace
}

// run starts the workers for one side and returns a function that waits
// for them. They stop when ctx is done; calls cut short by that are not
// recorded, since they say nothing about the server.
func (wl workload) run(ctx context.Context, f fleet, rec *recorder, seed uint64) (wait func()) {
	var wg sync.WaitGroup
	for w := range wl.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			// Spread the first calls over one interval so the workers do
			// not move in lockstep.
			next := time.Now().Add(time.Duration(rng.Int64N(int64(wl.interval))))
			for {
				if !sleepUntil(ctx, next) {
					return
				}
				key, group := wl.keys.pick(rng)
				start := time.Now()
				rec.inCall[w].Store(start.UnixNano())
				err := f.get(ctx, key)
				end := time.Now()
				rec.inCall[w].Store(0)
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, redis.Nil) {
					err = nil
				}
				rec.add(start, end, group, err)
				// A worker that fell behind starts its next request at once
				// but does not try to catch up: requests that arrived while
				// it was stuck were not served.
				if next = next.Add(wl.interval); next.Before(end) {
					next = end
				}
			}
		}()
	}
	return wg.Wait
}

// sleepUntil waits until t or until ctx is done; it reports whether to go on.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
