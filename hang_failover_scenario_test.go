package redisguard

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// pacedFailover is one client's run through a master's hang, until its
// replica is promoted and a while after.
type pacedFailover struct {
	name                    string
	pausedAt                time.Time
	failAt, promotedAt      time.Time // the cluster's FAIL mark on the hung master, and its replica's promotion
	reads, writes           *opRecord // group 0: the hung master's keys; 1: every other key
	openedAfter             time.Duration
	lost                    int // acknowledged writes whose value the keys do not hold
	replicaReads, unsafeErr int
}

// window is [from, to) relative to the records' start.
func (r pacedFailover) at(t time.Time) time.Duration { return t.Sub(r.reads.start) }

// hangUntilPromoted pauses the master that owns slot 0 now under paced
// readers and writers through c, until its replica is promoted, then
// resumes it; it keeps running for after.
func hangUntilPromoted(t *testing.T, cl *redistest.Cluster, name string, c redis.UniversalClient, events *eventLog,
	readers, writers int, interval, after time.Duration) pacedFailover {
	t.Helper()
	hung := cl.MasterForSlot(t, 0)
	replica := replicaOf(cl, hung)
	var hungKeys, otherKeys []string
	for i := 0; len(hungKeys) < 200 || len(otherKeys) < 400; i++ {
		k := "paced:" + name + ":" + strconv.Itoa(i)
		if cl.MasterForSlot(t, redistest.Slot(k)) == hung {
			if len(hungKeys) < 200 {
				hungKeys = append(hungKeys, k)
			}
		} else if len(otherKeys) < 400 {
			otherKeys = append(otherKeys, k)
		}
	}
	keys := [][]string{hungKeys, otherKeys}
	seed := testCtx(t, 30*time.Second)
	for _, g := range keys {
		for _, k := range g {
			require.NoError(t, c.Set(seed, k, "seed", 0).Err())
		}
	}
	r := pacedFailover{name: name, openedAfter: -1}
	// Each writer owns its keys, so that the last write it was told
	// succeeded is the value its key must hold at the end.
	type attempt struct {
		val string
		ok  bool
	}
	written := make([]map[string][]attempt, writers)
	for i := range written {
		written[i] = map[string][]attempt{}
	}
	const warm = 2 * time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		r.reads = runPacedUntil(readers, interval, stop, func(ctx context.Context, rng *rand.Rand, _ int) (int, error) {
			g := min(rng.IntN(3), 1) // a third of the reads on the hung master
			return g, ignoreNil(c.Get(ctx, keys[g][rng.IntN(len(keys[g]))]).Err())
		})
	})
	wg.Go(func() {
		r.writes = runPacedUntil(writers, interval, stop, func(ctx context.Context, rng *rand.Rand, seq int) (int, error) {
			w := seq >> 32
			g := min(rng.IntN(3), 1) // and a third of the writes
			// Writer w owns every key whose index is w modulo writers.
			i := w + writers*rng.IntN(len(keys[g])/writers)
			k, v := keys[g][i], strconv.Itoa(seq)
			err := c.Set(ctx, k, v, 0).Err()
			written[w][k] = append(written[w][k], attempt{v, err == nil})
			return g, err
		})
	})
	time.Sleep(warm)
	hung.Pause(t)
	r.pausedAt = time.Now()
	// The FAIL mark, as the first node to agree on it sees it: from then on
	// nodes refuse keyed commands until the replica is promoted.
	hungID := cl.NodeID(t, hung)
	for r.failAt.IsZero() && time.Since(r.pausedAt) < 30*time.Second {
		for _, m := range cl.Nodes() {
			if m == hung {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			nodes, err := m.Admin().ClusterNodes(ctx).Result()
			cancel()
			for _, line := range strings.Split(nodes, "\n") {
				if f := strings.Fields(line); err == nil && len(f) > 2 && f[0] == hungID &&
					strings.Contains(f[2], "fail") && !strings.Contains(f[2], "fail?") && r.failAt.IsZero() {
					r.failAt = time.Now()
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d := waitPromoted(replica, r.pausedAt, 30*time.Second); d >= 0 {
		r.promotedAt = r.pausedAt.Add(d)
	}
	time.Sleep(after)
	close(stop)
	wg.Wait()
	hung.Resume(t)
	cl.WaitHealthy(t)

	ctx := testCtx(t, 30*time.Second)
	for _, byKey := range written {
		for k, as := range byKey {
			val, err := c.Get(ctx, k).Result()
			require.NoError(t, err)
			last := -1
			for i, a := range as {
				if a.ok {
					last = i
				}
			}
			if last < 0 {
				continue
			}
			held := false
			for _, a := range as[last:] { // the last acknowledged value, or a later one that may have landed
				held = held || a.val == val
			}
			if !held {
				r.lost++
			}
		}
	}
	if events != nil {
		if at, _ := events.opened(hung.Addr, r.pausedAt); !at.IsZero() {
			r.openedAfter = at.Sub(r.pausedAt)
		}
	}
	return r
}

// caughtUp returns the earliest time, from, at which every worker of a
// paced record had started a call within tolerance of its schedule: from
// then on, none is still running calls it missed before. It returns the
// end of the record if some worker never did.
func (r *opRecord) caughtUp(from, tolerance time.Duration) time.Duration {
	at := from
	for _, ops := range r.per {
		i := slices.IndexFunc(ops, func(o op) bool { return o.at >= from && o.late < tolerance })
		if i < 0 {
			return time.Duration(1<<63 - 1)
		}
		at = max(at, ops[i].at)
	}
	return at
}

// runPacedUntil is runPaced until stop is closed.
func runPacedUntil(workers int, interval time.Duration, stop <-chan struct{}, fn func(ctx context.Context, rng *rand.Rand, seq int) (int, error)) *opRecord {
	rec := &opRecord{start: time.Now(), per: make([][]op, workers)}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			first := time.Duration(w) * interval / time.Duration(workers)
			for i := 0; ; i++ {
				at := first + time.Duration(i)*interval
				if wait := time.Until(rec.start.Add(at)); wait > 0 {
					select {
					case <-stop:
						return
					case <-time.After(wait):
					}
				}
				select {
				case <-stop:
					return
				default:
				}
				late := time.Since(rec.start.Add(at))
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				g, err := fn(ctx, rng, w<<32|i)
				cancel()
				rec.per[w] = append(rec.per[w], op{at: at, lat: time.Since(rec.start.Add(at)), late: late, group: g, err: err})
			}
		})
	}
	wg.Wait()
	return rec
}

// A master hangs until its replica is promoted (cluster-node-timeout 2s),
// under paced readers and writers without deadlines of their own, with
// ReadFromMasterPreferred. Its reads go to its replica from the moment it
// is seen hung, its writes fail fast and typed, the other slots keep their
// pace, and writes follow the promotion at once.
func TestScenarioHungMasterFailoverPaced(t *testing.T) {
	alone(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	readers, writers, interval := pick(32, 16), pick(8, 4), pick(2*time.Millisecond, 5*time.Millisecond)
	after := 3 * time.Second

	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	rs := hangUntilPromoted(t, cl, "stock", stock, nil, readers, writers, interval, after)
	require.NoError(t, stock.Close())

	events := &eventLog{}
	guard := newTestClient(t, Config{Addrs: cl.Addrs(), ReadFrom: ReadFromMasterPreferred, OnEvent: events.onEvent})
	rg := hangUntilPromoted(t, cl, "guard", guard, events, readers, writers, interval, after)

	type row struct {
		hungReadsOK, hungReads   int
		otherBefore, otherDuring float64
		otherErrs                int
		writesResumed            time.Duration
		failFastP99              time.Duration // writes scheduled once the writers caught up
		failFastP99All           time.Duration // every write scheduled from 100ms after the opening
		caughtUp                 time.Duration // after the opening, when every writer ran its calls on time again
		controlLate              time.Duration // p99 of how late the writes to the other slots were called, same window
		windowErrs               int
		p99Other                 time.Duration
	}
	measure := func(r pacedFailover) row {
		var out row
		paused, failAt, promoted := r.at(r.pausedAt), r.at(r.failAt), r.at(r.promotedAt)
		if r.failAt.IsZero() {
			failAt = promoted
		}
		// The cluster's own FAIL window: from the mark until just after the
		// promotion, every node refuses keyed commands.
		window := func(o op) bool { return o.at >= failAt && o.at < promoted+500*time.Millisecond }
		outside := func(keep func(op) bool) func(op) bool {
			return func(o op) bool { return !window(o) && (keep == nil || keep(o)) }
		}
		hung := r.reads.filter(0, paused, failAt, nil)
		out.hungReads = len(hung)
		out.hungReadsOK = len(filterOps(hung, okOps))
		before := func(rec *opRecord, g int) float64 { return rec.rate(g, 500*time.Millisecond, paused) }
		during := func(rec *opRecord, g int) float64 {
			n := len(rec.filter(g, paused, failAt, okOps)) + len(rec.filter(g, promoted+500*time.Millisecond, promoted+after, okOps))
			span := (failAt - paused) + (after - 500*time.Millisecond)
			return float64(n) / span.Seconds()
		}
		out.otherBefore = before(r.reads, 1) + before(r.writes, 1)
		out.otherDuring = during(r.reads, 1) + during(r.writes, 1)
		out.otherErrs = len(r.reads.filter(1, 0, time.Hour, outside(errOps))) + len(r.writes.filter(1, 0, time.Hour, outside(errOps)))
		out.windowErrs = len(r.reads.filter(-1, 0, time.Hour, func(o op) bool { return window(o) && o.err != nil })) +
			len(r.writes.filter(-1, 0, time.Hour, func(o op) bool { return window(o) && o.err != nil }))
		// The first write the promoted slots take, whenever it was
		// scheduled: the writers, held in the FAIL window's ride-out, run
		// the calls scheduled before the promotion first, and the hung
		// master, paused, takes none.
		out.writesResumed = -1
		for _, o := range r.writes.filter(0, 0, time.Hour, okOps) {
			if d := o.at + o.lat - promoted; d >= 0 && (out.writesResumed < 0 || d < out.writesResumed) {
				out.writesResumed = d
			}
		}
		if r.openedAfter >= 0 {
			opened := paused + r.openedAfter
			out.caughtUp = r.writes.caughtUp(opened, time.Millisecond) - opened
			out.failFastP99All = percentile(r.writes.filter(0, opened+100*time.Millisecond, failAt, errOps), 99)
			from := max(opened+100*time.Millisecond, opened+out.caughtUp)
			out.failFastP99 = percentile(r.writes.filter(0, from, failAt, errOps), 99)
			// The control: how late the same writers called their writes
			// to the other slots in the same window, which no breaker
			// touches.
			var late []op
			for _, o := range r.writes.filter(1, from, failAt, nil) {
				late = append(late, op{lat: o.late})
			}
			out.controlLate = percentile(late, 99)
		}
		out.p99Other = percentile(append(r.reads.filter(1, paused, failAt, nil), r.writes.filter(1, paused, failAt, nil)...), 99)
		return out
	}
	ms, mg := measure(rs), measure(rg)
	show := func(name string, r pacedFailover, m row) []string {
		opened := "never"
		if r.openedAfter >= 0 {
			opened = fmtDur(r.openedAfter)
		}
		resumed := "never"
		if m.writesResumed >= 0 {
			resumed = fmtDur(m.writesResumed)
		}
		failFast := "none"
		if r.openedAfter >= 0 {
			failFast = fmt.Sprintf("%s (control %s; %s from +100ms; caught up at +%s)", fmtDur(m.failFastP99), fmtDur(m.controlLate),
				fmtDur(m.failFastP99All), fmtDur(m.caughtUp))
		}
		return []string{name, opened, fmtDur(r.failAt.Sub(r.pausedAt)), fmtDur(r.promotedAt.Sub(r.pausedAt)),
			ratio(m.hungReadsOK, m.hungReads), fmtPct(m.otherDuring / m.otherBefore), fmtDur(m.p99Other), strconv.Itoa(m.otherErrs),
			resumed, failFast, strconv.Itoa(m.windowErrs), strconv.Itoa(r.lost)}
	}
	table(t, fmt.Sprintf("hung master until promotion: %d readers and %d writers, one op per %s each, ReadFromMasterPreferred, node-timeout 2s",
		readers, writers, interval),
		[]string{"client", "breaker opened", "FAIL mark", "promoted", "hung-slot reads answered before FAIL", "other slots' pace kept",
			"other slots p99", "other-slot errors", "writes after promotion", "failed writes p99 (control lateness; from +100ms; writers caught up at)", "errors in FAIL window", "lost writes"},
		show("go-redis", rs, ms), show("redisguard", rg, mg))
	t.Logf("go-redis errors: %s", errorKinds(append(rs.reads.filter(-1, 0, time.Hour, errOps), rs.writes.filter(-1, 0, time.Hour, errOps)...)))
	t.Logf("redisguard errors: %s", errorKinds(append(rg.reads.filter(-1, 0, time.Hour, errOps), rg.writes.filter(-1, 0, time.Hour, errOps)...)))

	if rg.openedAfter >= 0 {
		// The slowest failed writes from 100ms after the opening, to tell a
		// caller that started late (catching up, or a stalled process) from
		// a slow refusal.
		failed := rg.writes.filter(0, rg.at(rg.pausedAt)+rg.openedAfter+100*time.Millisecond, rg.at(rg.failAt), errOps)
		slices.SortFunc(failed, func(a, b op) int { return cmp.Compare(b.lat, a.lat) })
		for _, o := range failed[:min(5, len(failed))] {
			t.Logf("slow failed write: scheduled %s after the pause, called %s late, took %s in all: %v",
				fmtDur(o.at-rg.at(rg.pausedAt)), fmtDur(o.late), fmtDur(o.lat), o.err)
		}
	}
	require.False(t, rg.promotedAt.IsZero(), "the replica was never promoted")
	require.GreaterOrEqual(t, rg.openedAfter, time.Duration(0), "the hung master's breaker never opened")
	assert.LessOrEqual(t, rg.openedAfter, pick(time.Second, 1500*time.Millisecond))
	// From the hang to the FAIL mark, every read of the hung master's keys
	// is answered: by its replica once its breaker is open, those already
	// sent to it included.
	assert.Equal(t, mg.hungReads, mg.hungReadsOK, "reads of the hung master failed before the FAIL mark")
	// Every failure is typed: the documented set only, and a write to the
	// hung master refused with ErrNodeUnavailable once its breaker is open.
	for _, o := range append(rg.reads.filter(-1, 0, time.Hour, errOps), rg.writes.filter(-1, 0, time.Hour, errOps)...) {
		require.True(t, invDocumented(context.Background(), o.err), "an error outside the documented set: %v", o.err)
	}
	for _, o := range rg.writes.filter(0, rg.at(rg.pausedAt)+rg.openedAfter+100*time.Millisecond, rg.at(rg.promotedAt), errOps) {
		require.ErrorIs(t, o.err, ErrNodeUnavailable, "a write to the hung master after its breaker opened")
	}
	// In the cluster's FAIL window every node refuses keyed commands:
	// those are ridden out, not failed. Only writes to the hung master,
	// which nothing can serve until the promotion, fail there.
	inWindow := func(o op) bool {
		return o.err != nil && o.at >= rg.at(rg.failAt) && o.at < rg.at(rg.promotedAt)+500*time.Millisecond
	}
	failedInWindow := append(rg.reads.filter(-1, 0, time.Hour, inWindow), rg.writes.filter(1, 0, time.Hour, inWindow)...)
	assert.Empty(t, failedInWindow, "reads, or writes to the other slots, failed in the FAIL window: %s", errorKinds(failedInWindow))
	assert.Zero(t, mg.otherErrs, "calls for other slots failed outside the cluster's FAIL window")
	assert.GreaterOrEqual(t, mg.otherDuring/mg.otherBefore, pick(0.9, 0.6), "the other slots lost their pace")
	require.GreaterOrEqual(t, mg.writesResumed, time.Duration(0), "writes never followed the promotion")
	assert.LessOrEqual(t, mg.writesResumed, pick(500*time.Millisecond, 1500*time.Millisecond), "writes followed the promotion late")
	// Fail fast once the breaker is open: measured from each write's
	// scheduled start, from when every writer has run the calls it missed
	// while the master held it (until the opening, every writer's call to
	// the hung master waited, and the calls scheduled meanwhile then run
	// back to back; that catch-up is the detection's cost, bounded above,
	// and is reported too). The bound is the 5ms beyond the
	// control: how late the same writers called their writes to the other
	// slots in the same window (two cores, six servers and 40 callers
	// beside the test; 1-2ms in a quiet run, more when the machine is
	// busy). The short form runs with -race, whose scheduling delays reach
	// the p99; what it tells apart is failing at once from waiting out the
	// hang (seconds).
	assert.LessOrEqual(t, mg.caughtUp, pick(time.Second, 3*time.Second), "the writers never caught up after the opening")
	assert.LessOrEqual(t, mg.failFastP99, pick(5*time.Millisecond+mg.controlLate, 500*time.Millisecond), "writes to the hung master did not fail fast")
	assert.Zero(t, rg.lost, "acknowledged writes were lost")
}
