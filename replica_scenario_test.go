package redisguard

import (
	"context"
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

// The replica-read scenarios: one master of three hangs (SIGSTOP) for less
// than cluster-node-timeout, so nothing fails over, under 20 readers and 5
// writers on its slots. go-redis alone, redisguard with the default Config
// and redisguard with ReadFromMasterPreferred run one after the other on the
// same cluster; with ReadFromMasterPreferred the master's reads must go on
// from its replica once its breaker opens, and its writes fail typed.

const (
	replicaReaders     = 20
	replicaWriters     = 5
	replicaNodeTimeout = 5 * time.Second
	// replicaReadTimeout is the one timing setting the guarded runs lower,
	// as a user who wants timeouts to bite would: the breaker opens once
	// NodeFailureThreshold reads have timed out.
	replicaReadTimeout = 500 * time.Millisecond
)

// replicaRun is one client's run through a pause of the first master.
type replicaRun struct {
	name         string
	reads        []op // reads of the paused master's keys, from 1.5s into the pause until it resumes
	late         []op // reads from 4s into the pause until shortly before it resumes
	writeErrs    []op // failed writes during the pause
	lateWrites   []op // writes from 1.5s into the pause until it resumes
	replicaCalls int  // GETs the replica served before the pause
	errs         string
}

// pauseUnderLoad pauses master for pause under readers and writers of its
// keys through c, and returns what happened; replica is master's. during,
// if set, runs 2s into the pause.
func pauseUnderLoad(t *testing.T, master, replica *redistest.Server, keys []string, name string, c redis.UniversalClient,
	pause time.Duration, during func()) replicaRun {
	t.Helper()
	const warm = 1500 * time.Millisecond
	total := warm + pause + time.Second
	var reads, writes *opRecord
	var wg sync.WaitGroup
	wg.Go(func() {
		reads = runLoad(replicaReaders, total, func(ctx context.Context, rng *rand.Rand) (int, error) {
			return 0, c.Get(ctx, keys[rng.IntN(len(keys))]).Err()
		})
	})
	wg.Go(func() {
		writes = runLoad(replicaWriters, total, func(ctx context.Context, rng *rand.Rand) (int, error) {
			err := c.Set(ctx, keys[rng.IntN(len(keys))], strconv.Itoa(rng.IntN(1000)), 0).Err()
			if err != nil {
				// A failing writer paces itself as a service would (its
				// caller gets the error and comes back), rather than spin
				// and starve the readers of the two test CPUs.
				time.Sleep(time.Millisecond)
			}
			return 0, err
		})
	})
	before := commandCalls(t, []*redistest.Server{replica}, "get")
	time.Sleep(warm)
	r := replicaRun{name: name, replicaCalls: commandCalls(t, []*redistest.Server{replica}, "get") - before}
	master.Pause(t)
	paused := time.Now()
	if during != nil {
		time.Sleep(2 * time.Second)
		during()
	}
	time.Sleep(pause - time.Since(paused))
	master.Resume(t)
	wg.Wait()
	// Both records start within a few microseconds of each other.
	start := paused.Sub(reads.start)
	r.reads = reads.filter(0, start+1500*time.Millisecond, start+pause, nil)
	// Reads decided while the master still hangs: one started just before
	// the resume may be routed after it.
	r.late = reads.filter(0, start+4*time.Second, start+pause-300*time.Millisecond, nil)
	r.writeErrs = writes.filter(0, start, start+pause, errOps)
	r.lateWrites = writes.filter(0, start+1500*time.Millisecond, start+pause, nil)
	r.errs = errorKinds(append(reads.filter(0, 0, time.Hour, errOps), r.writeErrs...))
	return r
}

func (r replicaRun) row() []string {
	ok := len(filterOps(r.reads, okOps))
	rate := 0.0
	if len(r.reads) > 0 {
		rate = float64(ok) / float64(len(r.reads))
	}
	return []string{r.name, strconv.Itoa(len(r.reads)), fmtPct(rate), fmtDur(percentile(r.reads, 99)),
		strconv.Itoa(len(r.writeErrs)), strconv.Itoa(r.replicaCalls)}
}

func filterOps(ops []op, keep func(op) bool) []op {
	var out []op
	for _, o := range ops {
		if keep(o) {
			out = append(out, o)
		}
	}
	return out
}

func startReplicaCluster(t *testing.T) (*redistest.Cluster, []string) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: replicaNodeTimeout})
	keys := clusterKeys(t, cl, 200)[0]
	return cl, keys
}

// replicaSetup is one topology of the master-preferred scenario: the paused
// master, its replica, keys it serves, and how to build each client.
type replicaSetup struct {
	what            string
	master, replica *redistest.Server
	keys            []string
	stock           func(readOnly bool) redis.UniversalClient // go-redis alone, with ReadTimeout lowered; readOnly: its replica routing
	cfg             Config                                    // redisguard's default Config for the topology
	healthy         func(t testing.TB)                        // waits until it is healthy again
}

// checkMasterPreferred pauses the master for 4s under go-redis, redisguard
// with the default Config and redisguard with ReadFromMasterPreferred, one
// after the other, reports them side by side and checks the last: its reads
// go on from the replica from 1.5s into the pause, quickly; its writes fail
// typed; the replica serves no read while the master is healthy; Check,
// Stats and events say so.
func checkMasterPreferred(t *testing.T, s replicaSetup) {
	const pause = 4 * time.Second
	stock := s.stock(false)
	runs := []replicaRun{pauseUnderLoad(t, s.master, s.replica, s.keys, "go-redis", stock, pause, nil)}
	require.NoError(t, stock.Close())
	if scenarioFull() {
		// go-redis's own replica routing reads from replicas all the time.
		ro := s.stock(true)
		s.healthy(t)
		runs = append(runs, pauseUnderLoad(t, s.master, s.replica, s.keys, "go-redis replica routing", ro, pause, nil))
		require.NoError(t, ro.Close())
	}
	s.healthy(t)
	def := newTestClient(t, s.cfg)
	runs = append(runs, pauseUnderLoad(t, s.master, s.replica, s.keys, "redisguard default Config", def, pause, nil))
	require.NoError(t, def.Close())

	s.healthy(t)
	var mu sync.Mutex
	var events []Event
	cfg := s.cfg
	cfg.ReadTimeout, cfg.ReadFrom = replicaReadTimeout, ReadFromMasterPreferred
	cfg.OnEvent = func(e Event) {
		if e.Kind == EventReplicaReadsStarted || e.Kind == EventReplicaReadsStopped {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	}
	guard := newTestClient(t, cfg)
	var rep Report
	rg := pauseUnderLoad(t, s.master, s.replica, s.keys, "redisguard master_preferred", guard, pause, func() {
		rep = guard.Check(testCtx(t, 5*time.Second), CheckOptions{})
	})
	runs = append(runs, rg)

	rows := make([][]string, 0, len(runs))
	for _, r := range runs {
		rows = append(rows, r.row())
		t.Logf("%s errors: %s", r.name, r.errs)
	}
	table(t, fmt.Sprintf("%s: master paused %s, %d readers + %d writers on its keys", s.what, pause, replicaReaders, replicaWriters),
		[]string{"client", "reads 1.5s+ into pause", "succeeded", "p99", "failed writes", "replica GETs while healthy"}, rows...)

	ok := len(filterOps(rg.reads, okOps))
	require.NotEmpty(t, rg.reads)
	assert.GreaterOrEqual(t, float64(ok)/float64(len(rg.reads)), pick(0.99, 0.95), "reads of the paused master's keys failed")
	assert.LessOrEqual(t, percentile(rg.reads, 99), pick(10*time.Millisecond, 250*time.Millisecond), "replica reads are slow")
	assert.Zero(t, rg.replicaCalls, "the replica served reads while its master was healthy")
	// A write caught by the hang times out (or, not safe to repeat, ends
	// with ErrOutcomeUnknown); once the breaker is open every write fails
	// fast with ErrNodeUnavailable.
	require.NotEmpty(t, rg.lateWrites)
	for _, w := range rg.lateWrites {
		require.ErrorIsf(t, w.err, ErrNodeUnavailable, "a write 1.5s into the pause")
	}
	assert.Contains(t, rep.ReadFromReplica, s.master.Addr, "Check does not report the master read from its replica")

	var replicaReads uint64
	for _, n := range guard.Stats().Nodes {
		if n.Addr == s.replica.Addr {
			replicaReads = n.ReplicaReads
		}
	}
	assert.Positive(t, replicaReads, "Stats counts no replica reads")
	mu.Lock()
	defer mu.Unlock()
	// Starts and stops alternate, from a start to a stop: the master may
	// answer a read between two timeouts of its hang.
	require.NotEmpty(t, events)
	t.Logf("replica-read events: %v", events)
	for i, e := range events {
		want := EventReplicaReadsStarted
		if i%2 == 1 {
			want = EventReplicaReadsStopped
		}
		assert.Equal(t, want, e.Kind, "event %d", i)
		assert.Equal(t, s.master.Addr, e.Addr)
	}
	assert.Equal(t, EventReplicaReadsStopped, events[len(events)-1].Kind, "no stop once the master answered again")
}

// A cluster master hangs for less than cluster-node-timeout (5s).
func TestScenarioReplicaServesPausedMastersReads(t *testing.T) {
	// make test: TestMasterPreferredMovesOnlyReads, and the hung slots'
	// reads of TestScenarioHungMasterFailoverPaced.
	fullOnly(t)
	cl, keys := startReplicaCluster(t)
	checkMasterPreferred(t, replicaSetup{
		what:   fmt.Sprintf("cluster, 3 masters + 3 replicas, cluster-node-timeout %s", replicaNodeTimeout),
		master: cl.Masters[0], replica: cl.Replicas[0], keys: keys,
		stock: func(readOnly bool) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: replicaReadTimeout, ReadOnly: readOnly})
		},
		cfg:     Config{Mode: ModeCluster, Addrs: cl.Addrs()},
		healthy: cl.WaitHealthy,
	})
}

// A Sentinel-managed master hangs for less than down-after-milliseconds
// (5s): the sentinels do not fail it over.
func TestScenarioSentinelReplicaServesPausedMastersReads(t *testing.T) {
	sideBySide(t)
	g := redistest.StartSentinel(t)
	ctx := testCtx(t, 10*time.Second)
	for _, s := range g.Sentinels {
		require.NoError(t, s.Admin().Do(ctx, "sentinel", "set", g.MasterName, "down-after-milliseconds", replicaNodeTimeout.Milliseconds()).Err())
	}
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = "scenario:" + strconv.Itoa(i)
		require.NoError(t, g.Master.Admin().Set(ctx, keys[i], "v", 0).Err())
	}
	checkMasterPreferred(t, replicaSetup{
		what:   "sentinel, master + replica + 3 sentinels, down-after-milliseconds 5000",
		master: g.Master, replica: g.Replica, keys: keys,
		stock: func(readOnly bool) redis.UniversalClient {
			if readOnly {
				// ReplicaOnly sends everything to a replica, writes too
				// (they fail READONLY). NewFailoverClusterClient, which
				// routes reads alone, never stops its sentinel listener.
				return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.Addrs(),
					ReadTimeout: replicaReadTimeout, ReplicaOnly: true})
			}
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.Addrs(), ReadTimeout: replicaReadTimeout})
		},
		cfg: Config{Addrs: g.Addrs(), MasterName: g.MasterName},
		healthy: func(t testing.TB) {
			redistest.WaitFor(t, 10*time.Second, "the master to answer", func() error {
				return g.Master.Admin().Ping(context.Background()).Err()
			})
			g.Replica.WaitLinkUp(t)
		},
	})
}

// With MaxReplicaStaleness 1s, a replica that has not heard from its hung
// master for 4s serves no reads: each fails with ErrNodeUnavailable naming
// the master.
func TestScenarioStaleReplicaServesNoReads(t *testing.T) {
	sideBySide(t)
	cl, keys := startReplicaCluster(t)
	// Past 4s, but short of the failure detection cluster-node-timeout
	// starts: the replica must not be promoted meanwhile.
	const pause = 4800 * time.Millisecond
	guard := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ReadTimeout: replicaReadTimeout,
		ReadFrom: ReadFromMasterPreferred, MaxReplicaStaleness: time.Second})
	rg := pauseUnderLoad(t, cl.Masters[0], cl.Replicas[0], keys, "redisguard master_preferred, staleness 1s", guard, pause, nil)
	table(t, "master paused 4.8s, MaxReplicaStaleness 1s",
		[]string{"client", "reads 1.5s+ into pause", "succeeded", "p99", "failed writes", "replica GETs while healthy"}, rg.row())
	t.Logf("errors: %s", rg.errs)

	require.NotEmpty(t, rg.late)
	for _, o := range rg.late {
		require.Error(t, o.err, "a replica 4s+ behind served a read")
		require.ErrorIs(t, o.err, ErrNodeUnavailable)
		var ne *NodeError
		require.ErrorAs(t, o.err, &ne)
		require.Equal(t, cl.Masters[0].Addr, ne.Addr, "the error does not name the master")
	}
	var replicaReads uint64
	for _, n := range guard.Stats().Nodes {
		if n.Addr == cl.Replicas[0].Addr {
			replicaReads = n.ReplicaReads
		}
	}
	t.Logf("replica reads while fresh: %d", replicaReads)
}
