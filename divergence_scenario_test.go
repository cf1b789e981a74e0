package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Scenarios of the divergence issue: failovers of every kind must not turn
// into redirect-cycle errors, and a cycle that never converges must be
// classified, on its own slot only, within ClusterNodeTimeout.

// divergenceCounts classifies the errors of a run.
type divergenceCounts struct {
	ops, errs            int
	failover, corruption int // ErrClusterFailover, ErrSlotMapCorruption
	redirects            int // raw MOVED/ASK handed to the caller
	untyped              int // neither a redisguard error nor a server reply
	p99, worst           time.Duration
	kinds                string
	decisions            DivergenceStats // redisguard only
}

func countDivergence(ops []op) divergenceCounts {
	var r divergenceCounts
	var bad []op
	for _, o := range ops {
		r.ops++
		r.worst = max(r.worst, o.lat)
		if o.err == nil {
			continue
		}
		r.errs++
		bad = append(bad, o)
		switch {
		case errors.Is(o.err, ErrClusterFailover):
			r.failover++
		case errors.Is(o.err, ErrSlotMapCorruption):
			r.corruption++
		}
		if _, _, ok := redirectOf(o.err); ok {
			r.redirects++
		}
		if !typedError(o.err) {
			r.untyped++
		}
	}
	r.p99 = percentile(ops, 99)
	r.kinds = errorKinds(bad)
	return r
}

// typedError reports whether a caller can tell what err means without
// parsing text: one of redisguard's errors, or a server reply other than a
// redirect (which only means something to a cluster client).
func typedError(err error) bool {
	var ne *NodeError
	if isGuardError(err) || errors.Is(err, ErrClosed) || errors.As(err, &ne) {
		return true
	}
	_, _, redirect := redirectOf(err)
	return isRedisReply(err) && !redirect
}

// role returns s's ROLE ("master", "slave") or "" if it does not answer.
func role(s *redistest.Server) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := s.Admin().Do(ctx, "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return ""
	}
	name, _ := r[0].(string)
	return name
}

// currentReplica returns whichever of shard i's two nodes is a replica now.
func currentReplica(t *testing.T, cl *redistest.Cluster, i int) *redistest.Server {
	t.Helper()
	for _, s := range []*redistest.Server{cl.Masters[i], cl.Replicas[i]} {
		if role(s) == "slave" {
			return s
		}
	}
	t.Fatalf("shard %d has no replica", i)
	return nil
}

// Scenarios 1 and 2: CLUSTER FAILOVER [TAKEOVER] on each shard's replica in
// turn, 2.5s apart, under 50 writers. No redirect cycle may surface as an
// error, and ErrClusterFailover is never raised for a failover that works.
func TestScenarioGracefulFailover(t *testing.T) { failoverScenario(t, "") }

func TestScenarioTakeoverFailover(t *testing.T) { failoverScenario(t, "takeover") }

func failoverScenario(t *testing.T, mode string) {
	// make test: the chaos soak's graceful and takeover failovers, under
	// its no-raw-redirect invariant.
	fullOnly(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	keys := clusterKeys(t, cl, 300)
	const workers = 50
	const gap = 2500 * time.Millisecond
	warm, tail := time.Second, pick(3*time.Second, 2*time.Second)

	run := func(c redis.UniversalClient) divergenceCounts {
		promoted := make([]*redistest.Server, len(cl.Masters))
		recCh := make(chan *opRecord, 1)
		go func() {
			recCh <- runLoad(workers, warm+3*gap+tail, func(ctx context.Context, rng *rand.Rand) (int, error) {
				g := rng.IntN(len(keys))
				return g, c.Set(ctx, keys[g][rng.IntN(len(keys[g]))], rng.Int(), 0).Err()
			})
		}()
		time.Sleep(warm)
		for i := range cl.Masters {
			promoted[i] = currentReplica(t, cl, i)
			args := []any{"cluster", "failover"}
			if mode != "" {
				args = append(args, mode)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			require.NoError(t, promoted[i].Admin().Do(ctx, args...).Err())
			cancel()
			time.Sleep(gap)
		}
		rec := <-recCh
		// The scenario must have done what it says: every shard flipped.
		for i, s := range promoted {
			redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("shard %d's replica %s to be promoted", i, s.Addr), func() error {
				if r := role(s); r != "master" {
					return fmt.Errorf("role %q", r)
				}
				return nil
			})
		}
		cl.WaitHealthy(t)
		return countDivergence(rec.filter(-1, 0, time.Hour, nil))
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 50, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	rs := run(stock)
	require.NoError(t, stock.Close())

	guard := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 50,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ClusterNodeTimeout: 2 * time.Second,
	})
	rg := run(guard)
	rg.decisions = guard.Stats().Divergence

	name := "CLUSTER FAILOVER"
	if mode != "" {
		name += " " + mode
	}
	divergenceTable(t, fmt.Sprintf("%s on each of 3 shards, %s apart, %d writers, cluster-node-timeout 2s", name, gap, workers), rs, rg)

	assert.Zero(t, rg.failover, "ErrClusterFailover raised for a failover that completed")
	assert.Zero(t, rg.decisions.Failover)
	assert.Zero(t, rg.redirects, "raw redirects reached the application")
	if mode == "" {
		assert.Zero(t, rg.errs, "errors reached the application during graceful failovers")
		assert.LessOrEqual(t, rg.errs, rs.errs, "worse than go-redis alone")
	} else {
		assert.LessOrEqual(t, rg.errs, pick(5, 10), "more than a handful of errors during takeovers")
		assert.Zero(t, rg.untyped, "untyped errors reached the application")
	}
}

// divergenceTable prints the two clients' runs side by side.
func divergenceTable(t *testing.T, title string, rs, rg divergenceCounts) {
	t.Helper()
	row := func(name string, r divergenceCounts, decisions string) []string {
		return []string{name, strconv.Itoa(r.ops), strconv.Itoa(r.errs), strconv.Itoa(r.redirects), strconv.Itoa(r.untyped),
			strconv.Itoa(r.failover), strconv.Itoa(r.corruption), fmtDur(r.p99), fmtDur(r.worst), decisions}
	}
	d := rg.decisions
	table(t, title,
		[]string{"client", "ops", "errors", "raw MOVED/ASK", "untyped", "ErrClusterFailover", "ErrSlotMapCorruption", "p99", "max", "decisions (conv/recov/failover/corrupt)"},
		row("go-redis", rs, "-"),
		row("redisguard", rg, fmt.Sprintf("%d/%d/%d/%d", d.Converging, d.Recovered, d.Failover, d.SlotMapCorruption)))
	t.Logf("go-redis errors: %s", rs.kinds)
	t.Logf("redisguard errors: %s", rg.kinds)
}

// Scenario 3: the owner of a key's slot is told the slot belongs to another
// master (CLUSTER SETSLOT <slot> NODE <other>); the two now redirect to each
// other for ever. A GET on the key must be classified within
// ClusterNodeTimeout (1s here) plus slack, never returned as a raw MOVED;
// other slots must not notice; and once an operator repairs the slot the key
// must be served again within 2s.
func TestScenarioSlotCycle(t *testing.T) {
	alone(t) // its timings, and the other slots' latency the slow-node marks judge, move with the load beside it
	const nodeTimeout = time.Second
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	keys := clusterKeys(t, cl, 100)
	bad := emptySlotKey(t, cl, cl.Masters[0], keys)
	slot := redistest.Slot(bad)
	var others [][]string
	for _, g := range keys {
		var ks []string
		for _, k := range g {
			if redistest.Slot(k) != slot {
				ks = append(ks, k)
			}
		}
		others = append(others, ks)
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 20, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	defer stock.Close()
	events := &eventLog{}
	guard := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 20,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		ClusterNodeTimeout: nodeTimeout, OnEvent: events.onEvent,
	})
	ctx := testCtx(t, time.Minute)
	for _, c := range []redis.UniversalClient{stock, guard} {
		require.NoError(t, c.Get(ctx, others[0][0]).Err(), "warm-up")
	}
	cycledAt := time.Now()
	owner, other, repair := cycle(t, cl, bad)
	t.Logf("slot %d: %s now says %s owns it; %s still says %s does", slot, owner.Addr, other.Addr, other.Addr, owner.Addr)

	type probe struct {
		err, again    error
		took, tookNow time.Duration
		otherOps      int
		otherErrs     string
		otherBad      int
		served        time.Duration
	}
	measure := func(c redis.UniversalClient) probe {
		var p probe
		otherCh := make(chan *opRecord, 1)
		go func() {
			otherCh <- runLoad(20, nodeTimeout+2*time.Second, func(ctx context.Context, rng *rand.Rand) (int, error) {
				g := rng.IntN(len(others))
				return g, c.Get(ctx, others[g][rng.IntN(len(others[g]))]).Err()
			})
		}()
		start := time.Now()
		p.err = c.Get(ctx, bad).Err()
		p.took = time.Since(start)
		start = time.Now()
		p.again = c.Get(ctx, bad).Err()
		p.tookNow = time.Since(start)
		rec := <-otherCh
		all := rec.filter(-1, 0, time.Hour, nil)
		failed := rec.filter(-1, 0, time.Hour, errOps)
		p.otherOps, p.otherBad, p.otherErrs = len(all), len(failed), errorKinds(failed)
		return p
	}
	ps := measure(stock)
	pg := measure(guard)
	decisions := guard.Stats().Divergence

	// Repair, and see how soon each client is served again.
	repairedAt := time.Now()
	repair()
	served := func(c redis.UniversalClient) time.Duration {
		for time.Since(repairedAt) < 10*time.Second {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := c.Get(cctx, bad).Err()
			cancel()
			if err == nil || err == redis.Nil {
				return time.Since(repairedAt)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return -1
	}
	servedCh := make(chan time.Duration, 1)
	go func() { servedCh <- served(stock) }()
	pg.served = served(guard)
	ps.served = <-servedCh

	show := func(err error) string {
		if err == nil {
			return "ok"
		}
		msg := err.Error()
		return msg[:min(len(msg), 48)]
	}
	showServed := func(d time.Duration) string {
		if d < 0 {
			return "not within 10s"
		}
		return fmtDur(d)
	}
	row := func(name string, p probe) []string {
		return []string{name, show(p.err), fmtDur(p.took), show(p.again), fmtDur(p.tookNow),
			fmt.Sprintf("%d/%d", p.otherBad, p.otherOps), showServed(p.served)}
	}
	table(t, fmt.Sprintf("non-converging cycle on slot %d (ClusterNodeTimeout %s), 20 readers on other slots", slot, nodeTimeout),
		[]string{"client", "GET on the slot", "after", "GET again", "after", "other-slot errors", "served again after repair"},
		row("go-redis", ps), row("redisguard", pg))
	t.Logf("redisguard decisions: %+v", decisions)
	t.Logf("redisguard error: %v", pg.err)
	if ps.otherErrs != "" || pg.otherErrs != "" {
		t.Logf("other-slot errors: go-redis %s; redisguard %s", ps.otherErrs, pg.otherErrs)
		// Say why: the node events from the cycle on (a mark, an opening).
		evs, _ := events.all()
		for _, e := range evs {
			if e.Time.After(cycledAt) && e.Addr != "" {
				t.Logf("%s after the cycle: %s %s latency %v peers %v %s %v", fmtDur(e.Time.Sub(cycledAt)), e.Addr, e.Kind, e.Duration, e.PeerLatency, e.Decision, e.Err)
			}
		}
	}

	for _, err := range []error{pg.err, pg.again} {
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrClusterFailover) || errors.Is(err, ErrSlotMapCorruption), "unclassified: %v", err)
		_, _, redirect := redirectOf(err)
		assert.False(t, redirect, "a raw redirect reached the caller: %v", err)
	}
	assert.LessOrEqual(t, pg.took, nodeTimeout+time.Second+pick(time.Second, 3*time.Second), "beyond ClusterNodeTimeout + ReadTimeout + slack")
	assert.Less(t, pg.tookNow, nodeTimeout, "a slot known to be stuck made the caller wait again")
	assert.Zero(t, pg.otherBad, "commands on other slots failed")
	assert.Positive(t, pg.otherOps)
	require.GreaterOrEqual(t, pg.served, time.Duration(0), "the key was never served after the repair")
	assert.LessOrEqual(t, pg.served, pick(2*time.Second, 4*time.Second), "served too late after the repair")
}

// emptySlotKey returns a key owned by s whose slot holds none of keys, so
// that s will agree to give the slot away.
func emptySlotKey(t *testing.T, cl *redistest.Cluster, s *redistest.Server, keys [][]string) string {
	t.Helper()
	used := map[int]bool{}
	for _, g := range keys {
		for _, k := range g {
			used[redistest.Slot(k)] = true
		}
	}
	for i := range 100 {
		k := cl.KeyOn(t, s, "cycle:"+strconv.Itoa(i)+":")
		if !used[redistest.Slot(k)] {
			return k
		}
	}
	t.Fatal("no empty slot found")
	return ""
}

// Scenario 4: a master hangs (SIGSTOP) and its replica is promoted after
// cluster-node-timeout (2s); then the old master comes back, still believing
// it owns its slots until it hears of the higher epoch. None of that is a
// corrupt slot map, and writes must resume after the promotion.
func TestScenarioHardFailoverDivergence(t *testing.T) {
	// make test: TestScenarioSlotCycle and the chaos soak's failovers.
	fullOnly(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	keys := clusterKeys(t, cl, 300)
	const workers = 50
	warm, afterPromotion, afterResume := time.Second, pick(4*time.Second, 3*time.Second), pick(4*time.Second, 3*time.Second)

	type result struct {
		counts    divergenceCounts
		promoted  time.Duration // since the pause
		resumed   time.Duration // first write to the shard after promotion, since promotion
		afterBack int           // shard errors after the old master came back
	}
	run := func(c redis.UniversalClient, shard int) result {
		old := cl.MasterForSlot(t, redistest.Slot(keys[shard][0]))
		partner := replicaOf(cl, old)
		stop := make(chan struct{})
		recCh := make(chan *opRecord, 1)
		go func() {
			recCh <- runLoadUntil(workers, stop, func(ctx context.Context, rng *rand.Rand) (int, error) {
				g := rng.IntN(len(keys))
				return g, c.Set(ctx, keys[g][rng.IntN(len(keys[g]))], rng.Int(), 0).Err()
			})
		}()
		time.Sleep(warm)
		pausedAt := time.Now()
		old.Pause(t)
		promoted := waitPromoted(partner, pausedAt, 30*time.Second)
		require.GreaterOrEqual(t, promoted, time.Duration(0), "the replica was never promoted")
		time.Sleep(afterPromotion)
		resumedAt := time.Now()
		old.Resume(t)
		time.Sleep(afterResume)
		close(stop)
		rec := <-recCh
		cl.WaitHealthy(t)

		r := result{counts: countDivergence(rec.filter(-1, 0, time.Hour, nil)), promoted: promoted, resumed: -1}
		promotedAt := pausedAt.Add(promoted).Sub(rec.start)
		for _, o := range rec.filter(shard, promotedAt, time.Hour, okOps) {
			if d := o.at + o.lat - promotedAt; r.resumed < 0 || d < r.resumed {
				r.resumed = d
			}
		}
		r.afterBack = len(rec.filter(shard, resumedAt.Sub(rec.start), time.Hour, errOps))
		return r
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 50, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	rs := run(stock, 0)
	require.NoError(t, stock.Close())

	guard := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 50,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		NodeFailureThreshold: 5, ClusterNodeTimeout: 2 * time.Second,
	})
	rg := run(guard, 1)
	rg.counts.decisions = guard.Stats().Divergence

	divergenceTable(t, fmt.Sprintf("hard failover: one master paused until its replica is promoted (cluster-node-timeout 2s), then resumed; %d writers on all shards", workers),
		rs.counts, rg.counts)
	showD := func(d time.Duration) string {
		if d < 0 {
			return "never"
		}
		return fmtDur(d)
	}
	table(t, "hard failover: timing",
		[]string{"client", "replica promoted after", "shard writes resumed after promotion", "shard errors after old master resumed"},
		[]string{"go-redis", showD(rs.promoted), showD(rs.resumed), strconv.Itoa(rs.afterBack)},
		[]string{"redisguard", showD(rg.promoted), showD(rg.resumed), strconv.Itoa(rg.afterBack)})

	assert.Zero(t, rg.counts.corruption, "ErrSlotMapCorruption during a hard failover")
	assert.Zero(t, rg.counts.decisions.SlotMapCorruption)
	assert.Zero(t, rg.counts.redirects, "raw redirects reached the application")
	require.GreaterOrEqual(t, rg.resumed, time.Duration(0), "writes never resumed after the promotion")
	assert.LessOrEqual(t, rg.resumed, pick(time.Second, 3*time.Second), "writes resumed too slowly after the promotion")
}

// runLoadUntil is runLoad that stops when stop is closed rather than after a
// fixed time, for scenarios whose phases wait on the cluster.
func runLoadUntil(workers int, stop <-chan struct{}, fn func(ctx context.Context, rng *rand.Rand) (int, error)) *opRecord {
	rec := &opRecord{start: time.Now(), per: make([][]op, workers)}
	done := make(chan struct{}, workers)
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			rng := rand.New(rand.NewPCG(uint64(w), 43))
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				g, err := fn(ctx, rng)
				cancel()
				rec.per[w] = append(rec.per[w], op{at: t0.Sub(rec.start), lat: time.Since(t0), group: g, err: err})
			}
		}()
	}
	for range workers {
		<-done
	}
	return rec
}
