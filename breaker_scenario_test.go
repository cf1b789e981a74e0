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

// Scenario 1 and 4 of the breakers issue: one of three masters hangs
// (SIGSTOP) under 250 readers. Stock go-redis lets every goroutine queue
// behind the dead node; redisguard must keep serving the healthy slots, fail
// the dead node's requests fast, recover after the pause, and keep topology
// calls to at most about two a second during the event.
func TestScenarioPausedMaster(t *testing.T) {
	sideBySide(t)
	// A long node timeout: this scenario is a hang, not a failover, and the
	// other masters must not declare the cluster down meanwhile.
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	keys := clusterKeys(t, cl, 500)
	const workers = 250
	warm, pause, after := 2*time.Second, pick(6*time.Second, 4*time.Second), pick(4*time.Second, 3500*time.Millisecond)

	type result struct {
		name                string
		base, during        float64
		healthyErrs, deadOK int
		failFast            []op
		recoveredAfter      time.Duration
		slotsCalls          int
		errs                string
	}
	run := func(name string, c redis.UniversalClient) result {
		before := commandCalls(t, cl.Nodes(), "cluster|slots")
		recCh := make(chan *opRecord, 1)
		go func() {
			recCh <- runLoad(workers, warm+pause+after, func(ctx context.Context, rng *rand.Rand) (int, error) {
				g := rng.IntN(3)
				return g, c.Get(ctx, keys[g][rng.IntN(len(keys[g]))]).Err()
			})
		}()
		time.Sleep(warm)
		cl.Masters[0].Pause(t)
		time.Sleep(pause)
		cl.Masters[0].Resume(t)
		rec := <-recCh
		r := result{name: name, slotsCalls: commandCalls(t, cl.Nodes(), "cluster|slots") - before}
		healthyRate := func(from, to time.Duration) float64 { return rec.rate(1, from, to) + rec.rate(2, from, to) }
		r.base = healthyRate(500*time.Millisecond, warm)
		r.during = healthyRate(warm+2*time.Second, warm+pause)
		r.healthyErrs = len(rec.filter(1, 0, time.Hour, errOps)) + len(rec.filter(2, 0, time.Hour, errOps))
		r.failFast = rec.filter(0, warm+2*time.Second, warm+pause, func(o op) bool { return errors.Is(o.err, ErrNodeUnavailable) })
		r.recoveredAfter = -1
		for _, o := range rec.filter(0, warm+pause, time.Hour, okOps) {
			if d := o.at + o.lat - (warm + pause); r.recoveredAfter < 0 || d < r.recoveredAfter {
				r.recoveredAfter = d
			}
		}
		r.errs = errorKinds(rec.filter(-1, 0, time.Hour, errOps))
		return r
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 50,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	rs := run("go-redis", stock)
	require.NoError(t, stock.Close())
	cl.WaitHealthy(t)

	guard := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 50,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		NodeFailureThreshold: 5,
	})
	rg := run("redisguard", guard)

	row := func(r result) []string {
		rec := "never"
		if r.recoveredAfter >= 0 {
			rec = fmtDur(r.recoveredAfter)
		}
		return []string{r.name, fmtRate(r.base), fmtRate(r.during), fmtPct(r.during / r.base),
			strconv.Itoa(len(r.failFast)), fmtDur(percentile(r.failFast, 99)), strconv.Itoa(r.healthyErrs), rec,
			fmt.Sprintf("%.1f/s", float64(r.slotsCalls)/pause.Seconds())}
	}
	table(t, fmt.Sprintf("paused master: %d readers, pool 50/node, timeouts 1s, pause %s", workers, pause),
		[]string{"client", "healthy before", "healthy 2s+ into pause", "kept", "fail-fast ops", "fail-fast p99", "healthy errors", "recovered after resume", "CLUSTER SLOTS"},
		row(rs), row(rg))
	t.Logf("go-redis errors: %s", rs.errs)
	t.Logf("redisguard errors: %s", rg.errs)

	assert.GreaterOrEqual(t, rg.during/rg.base, pick(0.90, 0.5), "healthy-slot throughput collapsed during the pause")
	assert.NotEmpty(t, rg.failFast, "no request for the paused node failed fast with ErrNodeUnavailable")
	assert.LessOrEqual(t, percentile(rg.failFast, 99), pick(time.Millisecond, 50*time.Millisecond), "fail-fast is not fast")
	assert.Zero(t, rg.healthyErrs, "requests for healthy nodes failed")
	assert.GreaterOrEqual(t, rg.recoveredAfter, time.Duration(0), "the paused node never served again")
	assert.LessOrEqual(t, rg.recoveredAfter, pick(500*time.Millisecond, 1500*time.Millisecond), "the node came back too slowly")
	// At most four topology calls a second during the event (one each
	// refreshMinInterval), plus the initial load and the reload after
	// recovery.
	assert.LessOrEqual(t, float64(rg.slotsCalls), float64(pause)/float64(refreshMinInterval)+3, "topology refresh stampede")

	var n NodeStats
	for _, s := range guard.Stats().Nodes {
		if s.Addr == cl.Masters[0].Addr {
			n = s
		}
	}
	assert.GreaterOrEqual(t, n.Opens, uint64(1), "the paused master's breaker never opened")
	t.Logf("paused master: %d recovery probes, %d failed", n.Probes, n.ProbeFailures)
	assert.LessOrEqual(t, float64(n.Probes), 10*pause.Seconds(), "the paused master was probed more than 10 times a second")
}

// Scenario 2: a master hangs and its replica is promoted (node timeout 2s).
// Writes to its slots must follow the promotion promptly, counted from
// each write's scheduled start.
func TestScenarioHardFailover(t *testing.T) {
	// make test: TestScenarioHungMasterFailoverPaced.
	fullOnly(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second})
	// Writers paced as a service's are, one write each per 2ms: unpaced,
	// 50 goroutines spinning on fail-fast errors (about 45,000 a second
	// under -race) starve the two cores the cluster's own election and
	// CLUSTER SLOTS answers run on, and the lag measured is theirs.
	const workers, pace = 50, 2 * time.Millisecond
	observe := pick(25*time.Second, 10*time.Second)

	// run pauses the current owner of key's slot and reports how long after
	// the pause its replica was promoted and writes to that slot succeeded
	// again (-1: not within observe).
	run := func(c redis.UniversalClient, key string) (promoted, first time.Duration, errs string) {
		owner := cl.MasterForSlot(t, redistest.Slot(key))
		partner := replicaOf(cl, owner)
		ctx := testCtx(t, 10*time.Second)
		require.NoError(t, c.Set(ctx, key, "before", 0).Err())
		pausedAt := time.Now()
		owner.Pause(t)
		defer func() {
			owner.Resume(t)
			cl.WaitHealthy(t)
		}()
		promotedCh := make(chan time.Duration, 1)
		go func() { promotedCh <- waitPromoted(partner, pausedAt, observe) }()
		stop := make(chan struct{})
		time.AfterFunc(observe, func() { close(stop) })
		rec := runPacedUntil(workers, pace, stop, func(ctx context.Context, rng *rand.Rand, _ int) (int, error) {
			return 0, c.Set(ctx, key, rng.Int(), 0).Err()
		})
		first = -1
		for _, o := range rec.filter(0, 0, time.Hour, okOps) {
			if d := rec.start.Add(o.at + o.lat).Sub(pausedAt); first < 0 || d < first {
				first = d
			}
		}
		return <-promotedCh, first, errorKinds(rec.filter(-1, 0, time.Hour, errOps))
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(), PoolSize: 50, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	stockPromoted, stockFirst, stockErrs := run(stock, "failover:stock")
	require.NoError(t, stock.Close())

	guard := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 50,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		NodeFailureThreshold: 5,
	})
	oldOwner := cl.MasterForSlot(t, redistest.Slot("failover:guard"))
	promotedAddr := replicaOf(cl, oldOwner).Addr
	guardPromoted, guardFirst, guardErrs := run(guard, "failover:guard")

	show := func(d time.Duration) string {
		if d < 0 || d > observe {
			return "not within " + observe.String()
		}
		return fmtDur(d)
	}
	table(t, "hard failover: cluster-node-timeout 2s, one master paused, 50 writers to its slots, one write per 2ms each",
		[]string{"client", "replica promoted after", "writes succeed again after", "after promotion"},
		[]string{"go-redis", show(stockPromoted), show(stockFirst), show(stockFirst - stockPromoted)},
		[]string{"redisguard", show(guardPromoted), show(guardFirst), show(guardFirst - guardPromoted)})
	t.Logf("go-redis errors: %s", stockErrs)
	t.Logf("redisguard errors: %s", guardErrs)

	require.GreaterOrEqual(t, guardPromoted, time.Duration(0), "the cluster never promoted the replica")
	require.GreaterOrEqual(t, guardFirst, time.Duration(0), "writes never followed the promotion")
	// The cluster itself takes cluster-node-timeout plus an election
	// (about 3.2-3.5s here); what redisguard controls is the lag after that,
	// bounded by its refresh interval while the breaker is open.
	assert.LessOrEqual(t, guardFirst-guardPromoted, pick(time.Second, 3*time.Second), "writes followed the promotion too slowly")

	// An address that changes role never inherits a breaker that blocks
	// it: the promoted replica's never opened, and the old master, back as
	// a replica, is found by its probes.
	nodeState := func(addr string) NodeStats {
		for _, n := range guard.Stats().Nodes {
			if n.Addr == addr {
				return n
			}
		}
		return NodeStats{Addr: addr, State: "closed"}
	}
	assert.Zero(t, nodeState(promotedAddr).Opens, "the promoted replica's breaker opened")
	redistest.WaitFor(t, 10*time.Second, "the old master's breaker to let traffic through", func() error {
		if st := nodeState(oldOwner.Addr); st.State == "open" {
			return fmt.Errorf("old master %s still open after %d probes", st.Addr, st.Probes)
		}
		return nil
	})
}

// Scenario 3: connections reset by healthy servers (CLIENT KILL every 100ms)
// are retried on the same node; they must not open breakers or cost extra
// topology calls.
func TestScenarioConnectionResets(t *testing.T) {
	alone(t) // its error and opening counts move with the load of the tests beside it
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	keys := clusterKeys(t, cl, 200)
	const workers = 40
	d := pick(6*time.Second, 4*time.Second)

	run := func(c redis.UniversalClient) (errRate float64, slotsCalls int, errs string) {
		before := commandCalls(t, cl.Nodes(), "cluster|slots")
		stop := make(chan struct{})
		killerDone := make(chan struct{})
		go func() {
			defer close(killerDone)
			rng := rand.New(rand.NewPCG(7, 7))
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					m := cl.Masters[rng.IntN(len(cl.Masters))]
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = m.Admin().ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err()
					cancel()
				}
			}
		}()
		rec := runLoad(workers, d, func(ctx context.Context, rng *rand.Rand) (int, error) {
			g := rng.IntN(3)
			return g, c.Set(ctx, keys[g][rng.IntN(len(keys[g]))], rng.Int(), 0).Err()
		})
		close(stop)
		<-killerDone
		all := rec.filter(-1, 0, time.Hour, nil)
		bad := rec.filter(-1, 0, time.Hour, errOps)
		return float64(len(bad)) / float64(max(len(all), 1)), commandCalls(t, cl.Nodes(), "cluster|slots") - before, errorKinds(bad)
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 20})
	stockRate, stockSlots, stockErrs := run(stock)
	require.NoError(t, stock.Close())

	guard := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 20})
	guardRate, guardSlots, guardErrs := run(guard)

	table(t, fmt.Sprintf("connection resets: %d writers, CLIENT KILL TYPE normal on a random master every 100ms for %s", workers, d),
		[]string{"client", "error rate", "CLUSTER SLOTS calls"},
		[]string{"go-redis", fmtPct(stockRate), strconv.Itoa(stockSlots)},
		[]string{"redisguard", fmtPct(guardRate), strconv.Itoa(guardSlots)})
	t.Logf("go-redis errors: %s", stockErrs)
	t.Logf("redisguard errors: %s", guardErrs)

	assert.LessOrEqual(t, guardRate, 0.001, "resets reached callers")
	for _, n := range guard.Stats().Nodes {
		assert.Zero(t, n.Opens, "breaker of %s opened on resets", n.Addr)
	}
	assert.LessOrEqual(t, guardSlots, max(stockSlots, 1), "more topology calls than go-redis alone")
}

// replicaOf returns the node paired with s: its replica if s is a master at
// start, its former master otherwise.
func replicaOf(cl *redistest.Cluster, s *redistest.Server) *redistest.Server {
	for i, m := range cl.Masters {
		if m == s {
			return cl.Replicas[i]
		}
		if cl.Replicas[i] == s {
			return m
		}
	}
	return nil
}

// waitPromoted polls s's ROLE until it is a master and returns the time since
// start, or -1 after d.
func waitPromoted(s *redistest.Server, start time.Time, d time.Duration) time.Duration {
	for time.Since(start) < d {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		role, err := s.Admin().Do(ctx, "ROLE").Slice()
		cancel()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}
