package redisguard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// The chaos soak: a real 3+3 cluster and a standalone server behind the
// in-process fault proxy, a mixed workload from 100 goroutines, and a fault
// schedule in a seeded random order, a resharding step among the faults. At
// the end it checks, and prints, the invariants: every error is from the
// documented set, no acknowledged value is lost where no fault could lose
// it, no queue item is popped twice, no unsafe command (autopipelined or
// scripted) runs twice or otherwise than its caller was told, no call
// outlives its context, nothing leaks after Close, and the heap stays
// bounded.
//
// `make chaos` runs 60s of faults (REDISGUARD_CHAOS=60s); `make test` runs
// chaosDefault. REDISGUARD_CHAOS_SEED replays a schedule.
//
// The blackhole goes through a standalone server behind internal/faultproxy,
// used by a second guarded client inside the same workload: cluster nodes
// announce their own addresses in CLUSTER SLOTS and MOVED, so a client that
// reached a node through a proxy would be sent around it at the first
// redirect or refresh.

const (
	chaosDefault  = 20 * time.Second   // of faults, under make test
	chaosSeed     = 20261130           // the default schedule, so CI replays one schedule
	chaosName     = "redisguard-chaos" // ClientName of the cluster client
	chaosSideName = "redisguard-chaos-side"
	chaosOpTime   = 4 * time.Second // every op's context: generous, so overrun means a bug
	chaosOverrun  = 100 * time.Millisecond
	chaosHeap     = 3  // heap after the run, at most this times heap after warm-up
	chaosKeys     = 16 // keys per kv worker
	chaosQueues   = 6
	chaosChannel  = "chaos:channel"
	// chaosACLUser may run every command but the dangerous ones: no CLIENT
	// UNBLOCK, no CLIENT KILL. Part of the traffic runs as this user.
	chaosACLUser     = "chaos-acl"
	chaosACLPassword = "chaos-acl-pw"
)

// chaosACLArgs creates chaosACLUser on a server from its command line, so
// that a restarted node has it too.
var chaosACLArgs = []string{"--user", chaosACLUser, "on", ">" + chaosACLPassword, "~*", "&*", "+@all", "-@dangerous"}

// sideShard is the shard number of the standalone server behind the proxy.
const sideShard = 3

func chaosDuration(t *testing.T) time.Duration {
	s := os.Getenv("REDISGUARD_CHAOS")
	if s == "" {
		return chaosDefault
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err, "REDISGUARD_CHAOS")
	return d
}

func chaosSeedValue(t *testing.T) uint64 {
	s := os.Getenv("REDISGUARD_CHAOS_SEED")
	if s == "" {
		return chaosSeed
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "REDISGUARD_CHAOS_SEED")
	return n
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos soak: not in -short")
	}
	faultFor, seed := chaosDuration(t), chaosSeedValue(t)
	t.Logf("chaos: seed %d, %v of faults (replay: REDISGUARD_CHAOS_SEED=%d REDISGUARD_CHAOS=%v)", seed, faultFor, seed, faultFor)

	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 2 * time.Second,
		Args: chaosACLArgs})
	side := redistest.StartServer(t, chaosACLArgs...)
	proxy, err := faultproxy.New(side.Addr)
	require.NoError(t, err)
	defer proxy.Close()
	shardOf := slotShards(t, cl)

	// Everything started from here on belongs to the clients and the
	// workload, except the harness's process waiters of restarted servers.
	leakBase := goleak.IgnoreCurrent()

	opens := &breakerOpens{}
	cfg := Config{
		Addrs: cl.Addrs(), ClientName: chaosName, OnEvent: opens.onEvent,
		ReadTimeout: time.Second, PoolTimeout: time.Second,
		MaxConnections: 32, MaxLongConnections: 12,
		NodeFailureThreshold: 3, // NodeRecoveryTime at its default: recovery is probed, not timed
		ClusterNodeTimeout:   2 * time.Second,
	}
	c, err := NewClient(cfg)
	require.NoError(t, err)
	aclCfg := cfg
	aclCfg.Username, aclCfg.Password = chaosACLUser, chaosACLPassword
	ac, err := NewClient(aclCfg)
	require.NoError(t, err)
	sideCfg := Config{
		Addrs: []string{proxy.Addr()}, ClientName: chaosSideName, OnEvent: opens.onEvent,
		Username: chaosACLUser, Password: chaosACLPassword,
		// Above the stalls an in-process proxy sees on 2 CPUs under -race.
		ReadTimeout: 1500 * time.Millisecond, PoolTimeout: time.Second,
		NodeFailureThreshold: 3,
	}
	sc, err := NewClient(sideCfg)
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
			_ = ac.Close()
			_ = sc.Close()
		}
	}()

	w := newChaosWorld(t, c, ac, sc, cl, shardOf)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { // on a failed require below, stop the workload before the cluster goes
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	w.start(stop, &wg)

	warm := 2 * time.Second
	time.Sleep(warm)
	runtime.GC()
	warmHeap := liveHeap()

	sched := &chaosSchedule{t: t, cl: cl, proxy: proxy, w: w, rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	faultStart := time.Now()
	sched.run(faultFor)
	faultTook := time.Since(faultStart)
	sched.healAll(sched.last)
	cl.WaitHealthy(t)
	time.Sleep(2 * time.Second) // the workload runs on a healed cluster for a while

	close(stop)
	wg.Wait()
	runtime.GC()
	endHeap := liveHeap()
	if path := os.Getenv("REDISGUARD_CHAOS_HEAPPROFILE"); path != "" {
		writeHeapProfile(t, path) // what the heap holds at endHeap, before Close
	}

	lost := w.readBack(t, sched.lossy)
	once := w.checkOnce(t, sched.lossy)
	left := w.drainQueues(t)

	closeStart := time.Now()
	require.NoError(t, c.Close())
	require.NoError(t, ac.Close())
	require.NoError(t, sc.Close())
	closed = true
	closeTook := time.Since(closeStart)
	require.NoError(t, proxy.Close())

	leakErr := goleak.Find(leakBase,
		// go-redis's redial loop after failed dials (see TestMain).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// The harness waits on every redis-server process it (re)started.
		goleak.IgnoreAnyFunction("github.com/redisguard/redisguard/internal/redisproc.spawn.func1"),
	)
	conns := leftoverConns(t, append(cl.Nodes(), side), chaosName, chaosSideName)

	w.judge()
	r := w.report()
	r.falseOpens, r.opens = w.falseOpens(opens, proxy.Addr())
	r.crashes = sched.crashes
	r.seed, r.faultFor, r.faultTook, r.closeTook = seed, faultFor, faultTook, closeTook
	r.faults = sched.log
	r.lost, r.left = lost, left
	r.once, r.reshards, r.asked = once, sched.reshards, sched.asked
	r.warmHeap, r.endHeap = warmHeap, endHeap
	r.leak, r.conns = leakErr, conns
	t.Log(r.String())

	assert.Zero(t, r.untyped, "untyped errors: %s", r.samples)
	assert.Zero(t, r.redirects, "raw MOVED/ASK: %s", r.samples)
	assert.Zero(t, r.refusals, "raw refusals, not ridden out: %s", r.samples)
	assert.Zero(t, r.netHealthy, "network errors on a node no fault touched: %s", r.samples)
	assert.Zero(t, r.panics, "panics: %s", r.samples)
	assert.Empty(t, lost, "acknowledged values lost on keys no fault touched")
	assert.Zero(t, r.dupPops, "items popped more than once")
	assert.Zero(t, once.twice, "unsafe commands that ran twice: %v", once.samples)
	assert.Zero(t, once.lost, "once-only ops told they ran, never run on a shard no data-losing fault touched: %v", once.samples)
	assert.Zero(t, once.ranUntold, "once-only ops told they did not run, and ran: %v", once.samples)
	assert.Zero(t, once.unanswered, "once-only ops never answered")
	assert.NotZero(t, r.reshards, "no slot was resharded")
	assert.NotZero(t, r.asked, "the resharding steps sent no client ASK")
	assert.Zero(t, r.overruns, "calls outlived their context by more than %v (worst %v)", chaosOverrun, r.worstOverrun)
	assert.Zero(t, r.crashes, "a redis-server crashed by itself during the run (see the fault log)")
	assert.Empty(t, r.falseOpens, "breakers opened on nodes no fault touched")
	assert.NoError(t, leakErr, "goroutines left after Close")
	assert.Empty(t, conns, "connections left on the servers after Close")
	assert.LessOrEqual(t, endHeap, chaosHeap*warmHeap, "heap grew: %d after warm-up, %d after the run", warmHeap, endHeap)
	assert.NotZero(t, r.ok, "nothing succeeded: the workload never ran")
	for _, k := range []string{"kv", "pipeline", "tx", "once-auto", "once-script", "push", "pop", "pop-do", "pop-pipeline", "pop-cancel",
		"acl-pop", "acl-pop-do", "acl-pop-pipeline", "acl-pop-cancel", "side", "side-pop"} {
		assert.NotZero(t, r.okBy[k], "no %s op succeeded", k)
	}
	assert.NotZero(t, r.received, "the subscriber received nothing")
	assert.NotZero(t, r.shardReceived, "the shard channels' subscriber received nothing")
	assert.Empty(t, w.silentSubscriber(), "the subscriber received nothing within %v after these faults healed", subscriberResume)
	assert.NotZero(t, r.healthyTrue, "Healthy never said yes")
}

// writeHeapProfile writes the heap profile to path, for `go tool pprof
// -sample_index=inuse_space`.
func writeHeapProfile(t *testing.T, path string) {
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, pprof.WriteHeapProfile(f))
	t.Logf("heap profile written to %s", path)
}

// liveHeap is the heap the last garbage collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// leftoverConns lists, per server, the connections named after the clients.
// The servers notice a closed socket at once; a short wait absorbs the
// scheduling of their event loops.
func leftoverConns(t *testing.T, servers []*redistest.Server, names ...string) []string {
	t.Helper()
	var left []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		left = left[:0]
		for _, s := range servers {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			list, err := s.Admin().ClientList(ctx).Result()
			cancel()
			if err != nil {
				left = append(left, fmt.Sprintf("%s: CLIENT LIST: %v", s.Addr, err))
				continue
			}
			for _, line := range strings.Split(list, "\n") {
				for _, n := range names {
					if strings.Contains(line, " name="+n+" ") {
						left = append(left, s.Addr+": "+line)
					}
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}
