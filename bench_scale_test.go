package redisguard

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/svgplot"
)

// TestBenchScale is `make bench-scale`: how redisguard's cost grows with
// callers, pipeline length and cluster size, beside go-redis with its
// defaults and with redisguard's options, plain and through AutoPipeline.
// It regenerates the scale section of docs/performance.md and its charts.
// REDISGUARD_BENCH_SCALE=1 runs it in full (about 50 minutes); =quick runs a
// short smoke version that checks the harness and writes nothing.
//
// Every cell interleaves the clients, so the shared machine's noise mostly
// cancels. From 8 callers, as TestHealthyPathRatio does: a round runs each
// client for one timed slice, in a random order, and each ratio is a
// trimmed mean over the rounds of one round's ratio (sideRates.ratio). At
// one caller, where a slice's rate depends more on the machine than on the
// client, one goroutine calls the clients in turn, and a round is a block of
// calls (sideRates.alternate).
//
// A ratio the judge holds to a target rests on p.rounds rounds when it
// clears the target, or misses it, by two standard errors or more; when it
// is closer than that, its cell is measured on to p.judgedRounds in all and
// judged on every round (unsettled). The rule looks at the distance to the
// target, not at which side of it the ratio falls, so it adds no leaning
// towards a pass: it only narrows the error where the verdict depends on it.
func TestBenchScale(t *testing.T) {
	mode := os.Getenv("REDISGUARD_BENCH_SCALE")
	if mode != "1" && mode != "quick" {
		t.Skip("set REDISGUARD_BENCH_SCALE=1 (make bench-scale) to measure the cost curves")
	}
	p := scaleParams{rounds: 241, pipeRounds: 482, judgedRounds: 964, slice: 25 * time.Millisecond, calls: 20000, masters: []int{3, 6, 12}}
	if mode == "quick" {
		p = scaleParams{rounds: 3, pipeRounds: 3, judgedRounds: 6, slice: 20 * time.Millisecond, calls: 200, masters: []int{3}}
	}
	start := time.Now()
	var rep scaleReport
	rep.measureTopology(t, p, "standalone", 0)
	for _, m := range p.masters {
		rep.measureTopology(t, p, fmt.Sprintf("cluster of %d", m), m)
	}
	rep.took = time.Since(start)
	rep.params = p
	md := rep.markdown()
	t.Log("\n" + md)
	if mode == "quick" {
		rep.judge(t.Logf) // too few rounds to judge by
		return
	}
	rep.judge(t.Errorf)
	require.NoError(t, rep.write("docs"))
}

type scaleParams struct {
	rounds int // timed slices per side and cell
	// pipeRounds is rounds for the pipeline cells, whose slices hold fewer
	// and longer calls, and whose ratios are noisier for it.
	pipeRounds int
	// judgedRounds is rounds for a judged ratio that p.rounds leaves
	// within two standard errors of its target (unsettled), and always for the
	// pipeline of 100, the length the judge holds to a target: its standard
	// error with pipeRounds (about 0.009) is half the target's margin below
	// parity.
	judgedRounds int
	slice        time.Duration
	// calls is calls per side at one caller, alternated, in p.rounds
	// blocks; a cell measured on takes more blocks of the same size, up
	// to p.judgedRounds.
	calls   int
	masters []int // cluster sizes measured after standalone
}

// blockCalls is how many calls per side a block holds at one caller.
func (p scaleParams) blockCalls() int { return max(p.calls/p.rounds, 1) }

var (
	scaleCallers   = []int{1, 8, 64, 512}
	scalePipelines = []int{1, 10, 100, 1000}
)

// judgedPipeline is the pipeline length the judge holds to a target.
const judgedPipeline = 100

// The targets: redisguard's rate ÷ go-redis's with the same
// options, for single commands and the pipeline of 100, and through
// AutoPipeline for GET.
const (
	callTarget = 0.98
	apTarget   = 0.95
)

// The clients of one topology, in report order.
const (
	sideDefaults   = iota // go-redis, default options
	sideStock             // go-redis, redisguard's go-redis options, no hooks
	sideControl           // a second client like sideStock: the method's resolution
	sideGuard             // redisguard
	sideAPDefaults        // AutoPipeline of sideDefaults
	sideAPStock           // AutoPipeline of sideStock
	sideAPGuard           // AutoPipeline of sideGuard
	numSides
)

var sideNames = [numSides]string{"go-redis (defaults)", "go-redis (same options)", "control", "redisguard",
	"AutoPipeline go-redis (defaults)", "AutoPipeline go-redis (same options)", "AutoPipeline redisguard"}

// scaleCell is one measured point: each side's median throughput and
// latency quantiles, and the medians of the per-round ratios.
type scaleCell struct {
	topology, workload string
	n                  int // callers, or pipeline length
	rate               [numSides]float64
	p50, p99           [numSides]time.Duration
	ratio, ratioSE     float64 // redisguard / go-redis (same options: both identical clients), and its standard error
	rounds, apRounds   int     // what ratio and apRatio rest on: rounds, or blocks at one caller
	target, apTarget   float64 // what the judge holds ratio and apRatio to; 0 for none
	control            float64 // control / go-redis (same options)
	vsDefaults         float64 // redisguard / go-redis (defaults)
	apRatio, apSE      float64 // AutoPipeline redisguard / AutoPipeline go-redis (same options); NaN if not run
	apVsDefaults       float64 // AutoPipeline redisguard / AutoPipeline go-redis (defaults)
}

type idleCost struct {
	topology              string
	nodes                 int
	goroutines, heapBytes [2]float64 // go-redis (same options), redisguard: growth from building and warming one client
}

type refreshCost struct {
	masters int
	took    time.Duration // median CLUSTER SLOTS fetch through redisguard's refresh path
	allocs  float64       // per fetch, in this process
	ranges  int
}

type scaleReport struct {
	params  scaleParams
	took    time.Duration
	calls   []scaleCell // GET and SET by callers
	pipes   []scaleCell // pipelines of GETs by length, 8 callers
	idle    []idleCost
	refresh []refreshCost
}

// scaleTarget is one topology's clients.
type scaleTarget struct {
	name  string
	sides [numSides]redis.UniversalClient
	aps   []*redis.AutoPipeliner
	guard *Client
}

func (r *scaleReport) measureTopology(t *testing.T, p scaleParams, name string, masters int) {
	t.Helper()
	var addrs []string
	var cfg Config
	if masters == 0 {
		srv := redistest.StartServer(t)
		addrs = []string{srv.Addr}
		cfg = Config{Addrs: addrs}
	} else {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: masters})
		addrs = cl.Addrs()
		cfg = Config{Mode: ModeCluster, Addrs: addrs}
	}
	r.idle = append(r.idle, measureIdle(t, name, cfg, max(masters, 1)))
	if masters > 0 {
		r.refresh = append(r.refresh, measureRefresh(t, cfg, masters))
	}

	tg := newScaleTarget(t, name, cfg)
	ctx := testCtx(t, 30*time.Second)
	for _, c := range tg.sides {
		require.NoError(t, c.Set(ctx, "bench:key", "value", 0).Err())
		require.NoError(t, c.Get(ctx, "bench:key").Err())
	}
	get := func(ctx context.Context, c redis.Cmdable) error { return c.Get(ctx, "bench:key").Err() }
	set := func(ctx context.Context, c redis.Cmdable) error { return c.Set(ctx, "bench:key", "value", 0).Err() }
	for _, w := range []struct {
		name string
		op   func(context.Context, redis.Cmdable) error
	}{{"GET", get}, {"SET", set}} {
		ap := apGroup(0) // AutoPipeline SET has no target
		if w.name == "GET" {
			ap = apGroup(apTarget)
		}
		for _, n := range scaleCallers {
			cell := measureCell(t, p, tg, []sideGroup{plainGroup(callTarget), ap}, w.op, n)
			cell.topology, cell.workload, cell.n = name, w.name, n
			r.calls = append(r.calls, cell)
		}
	}
	for _, length := range scalePipelines {
		op := func(ctx context.Context, c redis.Cmdable) error {
			_, err := c.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for i := range length {
					pl.Get(ctx, "bench:pipe:"+strconv.Itoa(i%16))
				}
				return nil
			})
			if err == redis.Nil {
				return nil
			}
			return err
		}
		pp, group := p, plainGroup(0)
		pp.rounds = p.pipeRounds
		if length == judgedPipeline {
			pp.rounds, group = p.judgedRounds, plainGroup(callTarget)
		}
		cell := measureCell(t, pp, tg, []sideGroup{group}, op, 4*runtime.GOMAXPROCS(0))
		cell.topology, cell.workload, cell.n = name, "pipeline", length
		r.pipes = append(r.pipes, cell)
	}
}

func newScaleTarget(t *testing.T, name string, cfg Config) *scaleTarget {
	g := newTestClient(t, cfg)
	tg := &scaleTarget{name: name, guard: g}
	switch rc := g.UniversalClient.(type) {
	case *redis.Client:
		tg.sides[sideStock], tg.sides[sideControl] = goRedisLike(t, rc, nil), goRedisLike(t, rc, nil)
		tg.sides[sideDefaults] = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0]})
	case *redis.ClusterClient:
		opt := *rc.Options()
		opt.NewClient = nil // without redisguard's node hooks
		ctl := opt
		tg.sides[sideStock] = redis.NewClusterClient(&opt)
		tg.sides[sideControl] = redis.NewClusterClient(&ctl)
		tg.sides[sideDefaults] = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs})
	}
	tg.sides[sideGuard] = g
	for _, pair := range [][2]int{{sideAPDefaults, sideDefaults}, {sideAPStock, sideStock}, {sideAPGuard, sideGuard}} {
		ap, err := tg.sides[pair[1]].AutoPipeline()
		require.NoError(t, err, sideNames[pair[0]])
		tg.aps = append(tg.aps, ap)
		tg.sides[pair[0]] = autoPipelineSide{UniversalClient: tg.sides[pair[1]], ap: ap}
	}
	t.Cleanup(func() {
		for _, ap := range tg.aps {
			_ = ap.Close()
		}
		for _, s := range []int{sideDefaults, sideStock, sideControl} {
			_ = tg.sides[s].Close()
		}
	})
	return tg
}

// autoPipelineSide sends GET and SET through an AutoPipeliner; the rest of
// the client is its own.
type autoPipelineSide struct {
	redis.UniversalClient
	ap *redis.AutoPipeliner
}

func (s autoPipelineSide) Get(ctx context.Context, key string) *redis.StringCmd {
	return s.ap.Get(ctx, key)
}

func (s autoPipelineSide) Set(ctx context.Context, key string, value interface{}, exp time.Duration) *redis.StatusCmd {
	return s.ap.Set(ctx, key, value, exp)
}

// The sides measured together: plain calls, then AutoPipeline calls. The
// groups are measured apart, so that an AutoPipeline slice, which
// allocates far more, never runs just before a plain one.
var (
	plainSides = []int{sideDefaults, sideStock, sideControl, sideGuard}
	apSides    = []int{sideAPDefaults, sideAPStock, sideAPGuard}
)

// sideRatio is side's rate ÷ refs' (sideRates.ratio).
type sideRatio struct {
	side int
	refs []int
}

// The ratios a cell reports: redisguard against the two go-redis clients
// with its options, plain and through AutoPipeline.
var (
	guardRatio   = sideRatio{side: sideGuard, refs: []int{sideStock, sideControl}}
	apGuardRatio = sideRatio{side: sideAPGuard, refs: []int{sideAPStock}}
)

// sideGroup is sides measured together, and the ratio among them that the
// judge holds to target, if target is not 0.
type sideGroup struct {
	sides  []int
	ratio  sideRatio
	target float64
}

// plainGroup is the plain sides, guardRatio held to target.
func plainGroup(target float64) sideGroup {
	return sideGroup{sides: plainSides, ratio: guardRatio, target: target}
}

// apGroup is the AutoPipeline sides, apGuardRatio held to target.
func apGroup(target float64) sideGroup {
	return sideGroup{sides: apSides, ratio: apGuardRatio, target: target}
}

// unsettled reports whether a ratio estimated at est ± se is too close to
// target for a verdict: within two standard errors, on either side.
func unsettled(est, se, target float64) bool {
	return !math.IsNaN(se) && math.Abs(est-target) < 2*se
}

// measureCell runs op from callers goroutines on each group of sides of
// tg, the sides of a group interleaved (see sideRates), p.rounds rounds,
// and compares them. A group whose judged ratio that leaves unsettled is
// measured on to p.judgedRounds rounds.
func measureCell(t *testing.T, p scaleParams, tg *scaleTarget, groups []sideGroup, op func(context.Context, redis.Cmdable) error, callers int) scaleCell {
	t.Helper()
	var m sideRates
	rng := rand.New(rand.NewPCG(uint64(callers), uint64(len(groups))))
	var pool *callerPool
	if callers > 1 {
		pool = newCallerPool(t, callers)
	}
	measure := func(sides []int, rounds int) {
		if callers == 1 {
			m.alternate(t, p, tg, sides, op, rng, rounds)
		} else {
			m.slices(t, p, tg, sides, op, pool, rng, rounds)
		}
	}
	var c scaleCell
	for _, g := range groups {
		measure(g.sides, p.rounds)
		if g.target > 0 && p.rounds < p.judgedRounds {
			if est, se := m.ratio(g.ratio.side, g.ratio.refs...); unsettled(est, se, g.target) {
				t.Logf("%s, callers=%d: %s %s is within two standard errors of %.2f after %d rounds; measuring to %d",
					tg.name, callers, sideNames[g.ratio.side], withSE(est, se), g.target, p.rounds, p.judgedRounds)
				measure(g.sides, p.judgedRounds-p.rounds)
			}
		}
		switch g.ratio.side {
		case guardRatio.side:
			c.target = g.target
		case apGuardRatio.side:
			c.apTarget = g.target
		}
	}
	c.rounds, c.apRounds = len(m.rates[sideGuard]), len(m.rates[sideAPGuard])
	c.ratio, c.ratioSE = m.ratio(guardRatio.side, guardRatio.refs...)
	c.control, _ = m.ratio(sideControl, sideStock)
	c.vsDefaults, _ = m.ratio(sideGuard, sideDefaults)
	c.apRatio, c.apSE = m.ratio(apGuardRatio.side, apGuardRatio.refs...)
	c.apVsDefaults, _ = m.ratio(sideAPGuard, sideAPDefaults)
	for s := range numSides {
		c.rate[s] = math.NaN()
		if len(m.rates[s]) > 0 {
			c.rate[s] = median(m.rates[s])
			c.p50[s], c.p99[s] = m.hist[s].quantile(0.5), m.hist[s].quantile(0.99)
		}
	}
	return c
}

// sideRates is what measureCell measured: each side's calls per second,
// one figure per round (timed slices) or a single one (alternated calls),
// and its latencies.
type sideRates struct {
	rates [numSides][]float64
	hist  [numSides]latencyHist
}

// slices runs the sides of group for one timed slice each per round, in a
// new random order every round, so that no side always follows the same
// one, and appends rounds rounds. Two sides are compared round by round
// (ratio).
func (m *sideRates) slices(t *testing.T, p scaleParams, tg *scaleTarget, group []int, op func(context.Context, redis.Cmdable) error, pool *callerPool, rng *rand.Rand, rounds int) {
	for range rounds {
		seq := slices.Clone(group)
		rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
		for _, s := range seq {
			m.rates[s] = append(m.rates[s], timedSlice(t, pool, tg.sides[s], op, p.slice, &m.hist[s]))
		}
	}
}

// alternate is for one caller, where a timed slice's rate swings by a
// factor of three with the machine's state (how the idle process is woken),
// which lasts longer than a slice: one goroutine calls each side of group
// in turn, in a new random order every turn, so that every side meets the
// same states. It appends rounds blocks of p.calls/p.rounds turns, a block
// being a round: with one call in flight, a block's calls per second is
// the inverse of its mean call time.
func (m *sideRates) alternate(t *testing.T, p scaleParams, tg *scaleTarget, group []int, op func(context.Context, redis.Cmdable) error, rng *rand.Rand, rounds int) {
	ctx := context.Background()
	turns := p.blockCalls()
	seq := slices.Clone(group)
	runtime.GC()
	for range rounds {
		var total [numSides]time.Duration
		for range turns {
			rng.Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
			for _, s := range seq {
				t0 := time.Now()
				if err := op(ctx, tg.sides[s]); err != nil {
					t.Error(err)
					return
				}
				d := time.Since(t0)
				total[s] += d
				m.hist[s].add(d)
			}
		}
		for _, s := range group {
			m.rates[s] = append(m.rates[s], float64(turns)/total[s].Seconds())
		}
	}
}

// ratio compares a's rate with refs', round by round, against the geometric
// mean of refs' rates in the round (two identical references halve the
// noise their side adds): the mean of the rounds' log ratios, leaving out
// the tenth of rounds at each end, where a slice that met a pause of the
// machine lands. It also returns the estimate's standard error (from the
// winsorized variance; NaN under three rounds), and NaN for both if a side
// was not measured.
func (m *sideRates) ratio(a int, refs ...int) (est, se float64) {
	n := len(m.rates[a])
	logs := make([]float64, n)
	for _, r := range refs {
		if n == 0 || len(m.rates[r]) != n {
			return math.NaN(), math.NaN()
		}
	}
	for i := range logs {
		logs[i] = math.Log(m.rates[a][i])
		for _, r := range refs {
			logs[i] -= math.Log(m.rates[r][i]) / float64(len(refs))
		}
	}
	mean, se := trimmedMean(logs, 0.1)
	return math.Exp(mean), math.Exp(mean) * se
}

// trimmedMean returns the mean of xs without the share trim of its values
// at each end, and that mean's standard error (Tukey and McLaughlin: the
// winsorized standard deviation over (1-2·trim)·√n; NaN under three values).
func trimmedMean(xs []float64, trim float64) (mean, se float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	g := int(trim * float64(n))
	kept := s[g : n-g]
	for _, x := range kept {
		mean += x
	}
	mean /= float64(len(kept))
	if n < 3 {
		return mean, math.NaN()
	}
	var wmean, wvar float64
	win := func(i int) float64 { return s[min(max(i, g), n-g-1)] }
	for i := range s {
		wmean += win(i)
	}
	wmean /= float64(n)
	for i := range s {
		wvar += (win(i) - wmean) * (win(i) - wmean)
	}
	wvar /= float64(n - 1)
	return mean, math.Sqrt(wvar) / ((1 - 2*trim) * math.Sqrt(float64(n)))
}

// callerPool is the goroutines that make the calls of timed slices. They
// live for a whole measurement, as a service's callers do, so that a slice
// times calls rather than goroutine starts and the stack growth of each new
// goroutine's first call (which, at 512 callers and a few calls per
// goroutine per slice, cost a client with a deeper call stack up to 15%).
//
// Each caller waits for work and calls from callerDepth bytes down its
// stack, as a net/http handler does (see serveFrom).
type callerPool struct {
	work []chan func(i int)
	done sync.WaitGroup
}

// callerDepth is how far down its stack a caller makes its calls: where a
// net/http handler starts, below the 1120-byte frame of the server's
// per-connection goroutine (measured with Go 1.26: the handler function is
// entered 1248 bytes down). From a bare goroutine, about 400 bytes down,
// go-redis alone used its stack's first 4 KiB but for a few bytes, so any
// client adding a frame ran on stacks twice as large, grown again after
// every GC (docs/performance.md); from a handler's depth both use 8 KiB.
const callerDepth = 1152

// newCallerPool starts n callers, stopped when the test ends.
func newCallerPool(t testing.TB, n int) *callerPool {
	p := &callerPool{work: make([]chan func(int), n)}
	var exited sync.WaitGroup
	for i := range p.work {
		ch := make(chan func(int))
		p.work[i] = ch
		exited.Go(func() { p.serveFrom(i, ch) })
	}
	t.Cleanup(func() {
		for _, ch := range p.work {
			close(ch)
		}
		exited.Wait()
	})
	return p
}

// serveFrom runs caller i's work from below a frame of callerDepth bytes,
// which stays on the stack while the caller waits, as the server's frame
// stays under an idle keep-alive connection's handler.
//
//go:noinline
func (p *callerPool) serveFrom(i int, work <-chan func(int)) {
	var frame [callerDepth]byte
	holdFrame(&frame, i)
	for fn := range work {
		fn(i)
		p.done.Done()
	}
	holdFrame(&frame, i)
}

// holdFrame writes to frame, so that the compiler keeps it.
//
//go:noinline
func holdFrame(frame *[callerDepth]byte, i int) { frame[i%callerDepth]++ }

// run has every caller run fn with its index, and waits for them all.
func (p *callerPool) run(fn func(i int)) {
	p.done.Add(len(p.work))
	for _, ch := range p.work {
		ch <- fn
	}
	p.done.Wait()
}

// timedSlice runs op on c from every caller of pool for d and returns the
// calls completed per second; with h, it also records each call's latency.
func timedSlice(t *testing.T, pool *callerPool, c redis.Cmdable, op func(context.Context, redis.Cmdable) error, d time.Duration, h *latencyHist) float64 {
	ctx := context.Background()
	callers := len(pool.work)
	counts := make([]uint64, callers)
	var hs []latencyHist
	if h != nil {
		hs = make([]latencyHist, callers)
	}
	start := time.Now()
	end := start.Add(d)
	pool.run(func(i int) {
		for {
			t0 := time.Now()
			if !t0.Before(end) {
				return
			}
			if err := op(ctx, c); err != nil {
				t.Error(err)
				return
			}
			counts[i]++
			if hs != nil {
				hs[i].add(time.Since(t0))
			}
		}
	})
	elapsed := time.Since(start)
	var n uint64
	for i := range counts {
		n += counts[i]
		if h != nil {
			h.merge(&hs[i])
		}
	}
	return float64(n) / elapsed.Seconds()
}

// latencyHist counts latencies in buckets an eighth of a power of two wide
// (about 9%), from 1µs.
type latencyHist struct {
	n       uint64
	buckets [200]uint64
}

func (h *latencyHist) add(d time.Duration) {
	i := 0
	if us := float64(d) / float64(time.Microsecond); us > 1 {
		i = min(int(8*math.Log2(us)), len(h.buckets)-1)
	}
	h.buckets[i]++
	h.n++
}

func (h *latencyHist) merge(o *latencyHist) {
	h.n += o.n
	for i, b := range o.buckets {
		h.buckets[i] += b
	}
}

// quantile returns the upper edge of the bucket holding quantile q.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(h.n)))
	var seen uint64
	for i, b := range h.buckets {
		seen += b
		if seen >= want {
			return time.Duration(math.Exp2(float64(i+1)/8) * float64(time.Microsecond))
		}
	}
	return time.Duration(math.Exp2(float64(len(h.buckets))/8) * float64(time.Microsecond))
}

// idleSettle is how long the goroutine count must hold still for a
// client to count as idle (measureIdle).
const idleSettle = 250 * time.Millisecond

// settleGoroutines waits atLeast, and then until the number of goroutines
// has not changed for idleSettle, or until atMost has passed.
func settleGoroutines(atLeast, atMost time.Duration) {
	start := time.Now()
	last, since := runtime.NumGoroutine(), start
	for now := start; now.Sub(start) < atMost; now = time.Now() {
		if n := runtime.NumGoroutine(); n != last {
			last, since = n, now
		} else if now.Sub(start) >= atLeast && now.Sub(since) >= idleSettle {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// measureIdle builds go-redis (same options) and redisguard clients for cfg
// one after the other, sends one command to every node through each, and
// reports what each added to the process: goroutines and live heap.
func measureIdle(t *testing.T, name string, cfg Config, nodes int) idleCost {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	// Both sides are warmed alike: a Cluster client's node clients each
	// hold go-redis's maintenance-notification manager, with its goroutine,
	// until their first handshake (ModeAuto, turned off by a server that
	// refuses the notifications), so a node never dialed counts.
	type shards interface {
		ForEachShard(context.Context, func(context.Context, *redis.Client) error) error
	}
	warm := func(c redis.UniversalClient) {
		if cc, ok := c.(shards); ok && cfg.Mode == ModeCluster {
			require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }))
			return
		}
		require.NoError(t, c.Ping(ctx).Err())
	}
	snapshot := func() (int, uint64) {
		// Idle means idle for longer than the hang watch's goroutine
		// outlives the last reply (hangIdleStop), and than the
		// goroutines a client starts with (its first topology fetch)
		// take to end: the count is read once it has held still for
		// idleSettle, after hangIdleStop at least.
		settleGoroutines(hangIdleStop+idleSettle, 10*time.Second)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	cost := idleCost{topology: name, nodes: nodes}
	for i, build := range []func() redis.UniversalClient{
		func() redis.UniversalClient {
			resolved, err := cfg.resolve()
			require.NoError(t, err)
			return redis.NewUniversalClient(newCore(resolved, clock.Real()).options(resolved.MaxConnections))
		},
		func() redis.UniversalClient {
			g, err := NewClient(cfg)
			require.NoError(t, err)
			return g
		},
	} {
		g0, h0 := snapshot()
		c := build()
		warm(c)
		g1, h1 := snapshot()
		cost.goroutines[i] = float64(g1 - g0)
		cost.heapBytes[i] = float64(int64(h1) - int64(h0))
		require.NoError(t, c.Close())
	}
	return cost
}

// measureRefresh times the fetch behind a redisguard topology refresh (one
// CLUSTER SLOTS, parsed) on a cluster of masters nodes.
func measureRefresh(t *testing.T, cfg Config, masters int) refreshCost {
	t.Helper()
	g := newTestClient(t, cfg)
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, g.Ping(ctx).Err())
	const fetches = 30
	var took []float64
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for range fetches {
		g.topo.nextFetch.Store(0) // past the rate limit: a real fetch each time
		t0 := time.Now()
		require.NoError(t, g.ClusterSlots(ctx).Err())
		took = append(took, float64(time.Since(t0)))
	}
	runtime.ReadMemStats(&ms1)
	return refreshCost{masters: masters, took: time.Duration(median(took)),
		allocs: float64(ms1.Mallocs-ms0.Mallocs) / fetches, ranges: len(g.topo.slotMap().Slots())}
}

// judge holds each cell's ratios to the targets it was measured for
// (measureTopology: single commands and pipelines of 100 at callTarget of
// go-redis with the same options, AutoPipeline GET at apTarget).
func (r *scaleReport) judge(fail func(format string, args ...any)) {
	for _, c := range r.calls {
		if c.ratio < c.target {
			fail("%s %s at %d callers: redisguard/go-redis %s < %.2f on %d rounds (control %.3f)", c.topology, c.workload, c.n, withSE(c.ratio, c.ratioSE), c.target, c.rounds, c.control)
		}
		if c.apRatio < c.apTarget {
			fail("%s AutoPipeline %s at %d callers: redisguard/go-redis %s < %.2f on %d rounds", c.topology, c.workload, c.n, withSE(c.apRatio, c.apSE), c.apTarget, c.apRounds)
		}
	}
	for _, c := range r.pipes {
		if c.ratio < c.target {
			fail("%s pipeline of %d: redisguard/go-redis %s < %.2f on %d rounds (control %.3f)", c.topology, c.n, withSE(c.ratio, c.ratioSE), c.target, c.rounds, c.control)
		}
	}
	for _, c := range r.idle {
		if c.goroutines[1] > c.goroutines[0] {
			fail("%s: an idle redisguard client runs %.0f goroutines, go-redis %.0f", c.topology, c.goroutines[1], c.goroutines[0])
		}
	}
}

const (
	scaleBegin = "<!-- bench-scale:begin (generated by make bench-scale; do not edit) -->"
	scaleEnd   = "<!-- bench-scale:end -->"
)

// write replaces the generated section of dir/performance.md and writes the
// charts beside it.
func (r *scaleReport) write(dir string) error {
	path := filepath.Join(dir, "performance.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, scaleBegin), strings.Index(s, scaleEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q section", path, scaleBegin, scaleEnd)
	}
	s = s[:i] + scaleBegin + "\n" + r.markdown() + s[j:]
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		return err
	}
	for file, chart := range r.charts() {
		var b bytes.Buffer
		if err := chart.WriteSVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, file), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (r *scaleReport) markdown() string {
	var b strings.Builder
	p := r.params
	fmt.Fprintf(&b, "\nRun of %s: `make bench-scale`, %d rounds of %v slices per cell (at one caller, %d blocks of %d calls per client, alternated), %d per pipeline cell and %d for the pipelines of %d; a judged ratio that came within two standard errors of its target on %d rounds was measured on to %d and judged on all of them (its rounds are given beside it); %v in all; GOMAXPROCS %d, %s/%s, %s, load average at the end %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), p.rounds, p.slice, p.rounds, p.blockCalls(), p.pipeRounds, p.judgedRounds, judgedPipeline,
		p.rounds, p.judgedRounds, r.took.Round(time.Second), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadAverage())
	b.WriteString("![GET throughput by callers](scale-throughput.svg)\n![ratio to go-redis by callers](scale-ratio.svg)\n![pipelines](scale-pipeline.svg)\n\n")

	b.WriteString("### GET and SET by callers\n\n")
	b.WriteString("Throughput in calls/s (median slice; at one caller, median block, a block's rate being the inverse of its mean call time); ratio = redisguard ÷ go-redis with the same options (the two identical clients), ± its standard error (control: one of those clients ÷ the other, the run's resolution); AP = through `AutoPipeline()`; latency p50/p99 over every call of the cell.\n\n")
	b.WriteString("| topology | op | callers | go-redis (defaults) | go-redis | redisguard | ratio ± se (control) | vs defaults | p50 / p99 go-redis | p50 / p99 redisguard | AP go-redis (defaults) | AP go-redis | AP redisguard | AP ratio | AP vs defaults |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.calls {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s (%.3f) | %.3f | %s / %s | %s / %s | %s | %s | %s | %s | %.3f |\n",
			c.topology, c.workload, c.n, rate(c.rate[sideDefaults]), rate(c.rate[sideStock]), rate(c.rate[sideGuard]),
			r.judgedOn(c.ratio, c.ratioSE, c.rounds), c.control, c.vsDefaults, dur(c.p50[sideStock]), dur(c.p99[sideStock]), dur(c.p50[sideGuard]), dur(c.p99[sideGuard]),
			rate(c.rate[sideAPDefaults]), rate(c.rate[sideAPStock]), rate(c.rate[sideAPGuard]), r.judgedOn(c.apRatio, c.apSE, c.apRounds), c.apVsDefaults)
	}

	fmt.Fprintf(&b, "\n### Pipelines of GETs by length (%d callers)\n\n", 4*runtime.GOMAXPROCS(0))
	b.WriteString("| topology | length | go-redis (defaults) | go-redis | redisguard | ratio ± se (control) | vs defaults | p99 go-redis | p99 redisguard |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.pipes {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s (%.3f) | %.3f | %s | %s |\n", c.topology, c.n,
			rate(c.rate[sideDefaults]), rate(c.rate[sideStock]), rate(c.rate[sideGuard]), withSE(c.ratio, c.ratioSE), c.control, c.vsDefaults,
			dur(c.p99[sideStock]), dur(c.p99[sideGuard]))
	}

	b.WriteString("\n### An idle client\n\nWhat building one client and sending one command to each master added to the process, once the client had been idle for a second and more (redisguard's hang watch ends its goroutine a second after the last reply) and its goroutine count had held still for 250ms, after a GC.\n\n")
	b.WriteString("| topology | goroutines go-redis | goroutines redisguard | heap go-redis | heap redisguard | redisguard heap per node |\n|---|---|---|---|---|---|\n")
	for _, c := range r.idle {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %s | %s | %s |\n", c.topology, c.goroutines[0], c.goroutines[1],
			bytesStr(c.heapBytes[0]), bytesStr(c.heapBytes[1]), bytesStr(c.heapBytes[1]/float64(c.nodes)))
	}

	if len(r.refresh) > 0 {
		b.WriteString("\n### A topology refresh\n\nOne slot-map fetch (CLUSTER SLOTS, parsed) through redisguard's refresh path, median of 30.\n\n| masters | slot ranges | time | allocations |\n|---|---|---|---|\n")
		for _, c := range r.refresh {
			fmt.Fprintf(&b, "| %d | %d | %s | %.0f |\n", c.masters, c.ranges, dur(c.took), c.allocs)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// charts are the SVGs written beside performance.md, by file name.
func (r *scaleReport) charts() map[string]svgplot.Chart {
	x := make([]string, len(scaleCallers))
	for i, n := range scaleCallers {
		x[i] = strconv.Itoa(n)
	}
	series := func(topology, workload string, pick func(scaleCell) float64) []float64 {
		out := make([]float64, 0, len(scaleCallers))
		for _, c := range r.calls {
			if c.topology == topology && c.workload == workload {
				out = append(out, pick(c))
			}
		}
		return out
	}
	throughput := svgplot.Chart{Title: "GET throughput by callers, standalone", XLabel: "concurrent callers", YLabel: "calls/s", X: x}
	for _, s := range []int{sideDefaults, sideStock, sideGuard, sideAPDefaults, sideAPStock, sideAPGuard} {
		throughput.Series = append(throughput.Series, svgplot.Series{Name: sideNames[s], Dashed: s >= sideAPDefaults,
			Y: series("standalone", "GET", func(c scaleCell) float64 { return c.rate[s] })})
	}
	ratio := svgplot.Chart{Title: "redisguard ÷ go-redis (same options), by callers", XLabel: "concurrent callers",
		YLabel: "throughput ratio", X: x, YMin: 0.85, YMax: 1.1, Ref: 0.98, RefLabel: "0.98"}
	topologies := []string{"standalone"}
	for _, m := range r.params.masters {
		topologies = append(topologies, fmt.Sprintf("cluster of %d", m))
	}
	for _, tp := range topologies {
		ratio.Series = append(ratio.Series, svgplot.Series{Name: "GET, " + tp, Y: series(tp, "GET", func(c scaleCell) float64 { return c.ratio })})
	}
	ratio.Series = append(ratio.Series,
		svgplot.Series{Name: "AutoPipeline GET, standalone", Dashed: true, Y: series("standalone", "GET", func(c scaleCell) float64 { return c.apRatio })},
		svgplot.Series{Name: "control, standalone", Color: "#999999", Dashed: true, Y: series("standalone", "GET", func(c scaleCell) float64 { return c.control })})

	px := make([]string, len(scalePipelines))
	for i, n := range scalePipelines {
		px[i] = strconv.Itoa(n)
	}
	pipes := svgplot.Chart{Title: "Pipelines: redisguard ÷ go-redis (same options), by length", XLabel: "commands per pipeline",
		YLabel: "throughput ratio", X: px, YMin: 0.85, YMax: 1.1, Ref: 0.98, RefLabel: "0.98"}
	for _, tp := range topologies {
		var ys []float64
		for _, c := range r.pipes {
			if c.topology == tp {
				ys = append(ys, c.ratio)
			}
		}
		pipes.Series = append(pipes.Series, svgplot.Series{Name: tp, Y: ys})
	}
	return map[string]svgplot.Chart{"scale-throughput.svg": throughput, "scale-ratio.svg": ratio, "scale-pipeline.svg": pipes}
}

// judgedOn is withSE, with the rounds the ratio rests on when a close
// verdict took it past r.params.rounds.
func (r *scaleReport) judgedOn(v, se float64, rounds int) string {
	if rounds > r.params.rounds {
		return fmt.Sprintf("%s on %d rounds", withSE(v, se), rounds)
	}
	return withSE(v, se)
}

// withSE formats a ratio and, where there is one, its standard error.
func withSE(v, se float64) string {
	if math.IsNaN(se) {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.3f ± %.3f", v, se)
}

func rate(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func dur(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
}

func bytesStr(v float64) string {
	switch {
	case math.Abs(v) >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case math.Abs(v) >= 1<<10:
		return fmt.Sprintf("%.0f KiB", v/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", v)
	}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// TestUnsettledVerdict: a judged ratio is measured on when its distance to
// the target, on either side, is under two standard errors, and never
// without a standard error to weigh it by.
func TestUnsettledVerdict(t *testing.T) {
	for _, tt := range []struct {
		est, se float64
		want    bool
	}{
		{0.979, 0.008, true},  // below the target, within the error
		{0.985, 0.008, true},  // above it, within the error
		{0.995, 0.006, false}, // clears it by 2.5 errors
		{0.960, 0.005, false}, // misses it by 4
		{0.979, math.NaN(), false},
	} {
		require.Equal(t, tt.want, unsettled(tt.est, tt.se, callTarget), "%.3f ± %.3f", tt.est, tt.se)
	}
}
