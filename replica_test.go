package redisguard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

func TestReadFromStringRoundTrips(t *testing.T) {
	for r := ReadFromMaster; r <= ReadFromAny; r++ {
		got, ok := parseReadFrom(r.String())
		assert.True(t, ok, r.String())
		assert.Equal(t, r, got)
	}
	assert.Equal(t, "ReadFrom(9)", ReadFrom(9).String())
	_, ok := parseReadFrom("replica")
	assert.False(t, ok)
}

func TestReadFromValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error; "" for valid
	}{
		{"cluster master preferred", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, ReadFrom: ReadFromMasterPreferred}, ""},
		{"auto with many addresses", Config{Addrs: []string{"a:1", "b:1"}, ReadFrom: ReadFromAny}, ""},
		{"out of range", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, ReadFrom: ReadFromAny + 1}, "ReadFrom 5 is not a known ReadFrom"},
		{"negative", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, ReadFrom: -1}, "ReadFrom -1"},
		{"standalone", Config{Mode: ModeStandalone, Addrs: []string{"a:1"}, ReadFrom: ReadFromNearest}, "ReadFrom is nearest, but a standalone server"},
		{"standalone master", Config{Mode: ModeStandalone, Addrs: []string{"a:1"}, ReadFrom: ReadFromMaster}, ""},
		{"sentinel", Config{Addrs: []string{"a:1"}, MasterName: "m", ReadFrom: ReadFromMasterPreferred}, "ReadFrom is master_preferred, but Sentinel"},
		{"negative staleness", Config{Mode: ModeCluster, Addrs: []string{"a:1"}, MaxReplicaStaleness: -time.Second}, "MaxReplicaStaleness is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.resolve()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestReadFromDetectedStandaloneIsInvalid(t *testing.T) {
	cfg := Config{Addrs: []string{"a:1"}, ReadFrom: ReadFromMasterPreferred}
	err := applyDetected(&cfg, ModeStandalone)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "ReadFrom")
	cfg = Config{Addrs: []string{"a:1"}, ReadFrom: ReadFromMasterPreferred}
	require.NoError(t, applyDetected(&cfg, ModeCluster))
}

// routeFixture is a replicas router over a fixed slot map (one master, one
// replica), with breakers on a fake clock and the lag answered by lag.
type routeFixture struct {
	r               *replicas
	clk             *clock.Fake
	master, replica *node
	events          []Event
	mu              sync.Mutex
	lagAnswer       time.Duration
	lagErr          error
	polls           int
}

func newRouteFixture(t *testing.T, from ReadFrom, staleness time.Duration) *routeFixture {
	f := &routeFixture{clk: clock.NewFake(time.Unix(1000, 0))}
	cfg, err := Config{Mode: ModeCluster, Addrs: []string{"m:1"}, ReadFrom: from, MaxReplicaStaleness: staleness,
		OnEvent: func(e Event) { f.mu.Lock(); f.events = append(f.events, e); f.mu.Unlock() }}.resolve()
	require.NoError(t, err)
	k := newCore(cfg, f.clk)
	nodes := newNodeSet(k, nil, func(context.Context, string, time.Duration) error { return errors.New("down") })
	t.Cleanup(nodes.close)
	slots := []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: "m:1"}, {Addr: "r:1"}}}}
	f.r = &replicas{k: k, nodes: nodes, slots: func() []redis.ClusterSlot { return slots }}
	if staleness > 0 {
		f.r.lag = newLagTracker(f.clk, staleness, time.Second, func(context.Context, string) (time.Duration, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.polls++
			return f.lagAnswer, f.lagErr
		})
		t.Cleanup(f.r.lag.close)
	}
	f.master, f.replica = nodes.get("m:1"), nodes.get("r:1")
	return f
}

// open opens n's breaker with failures.
func open(n *node) {
	for n.br.State() != breaker.Open {
		tk, _ := n.br.Allow()
		n.br.Done(tk, breaker.Failure)
	}
}

func TestReplicaRoute(t *testing.T) {
	ctx := context.Background()
	t.Run("master preferred: the master while its breaker is not open", func(t *testing.T) {
		f := newRouteFixture(t, ReadFromMasterPreferred, 0)
		sh := f.r.shardOf("r:1")
		require.NotNil(t, sh)
		assert.Nil(t, f.r.shardOf("m:1"), "a master has no shard as a replica")
		assert.Equal(t, routeMaster, f.r.route(ctx, sh, f.replica))
		open(f.master)
		assert.Equal(t, routeReplica, f.r.route(ctx, sh, f.replica))
		open(f.replica)
		assert.Equal(t, routeNowhere, f.r.route(ctx, sh, f.replica))
	})
	t.Run("replica preferred: the replica while it is usable", func(t *testing.T) {
		f := newRouteFixture(t, ReadFromReplicaPreferred, 0)
		sh := f.r.shardOf("r:1")
		assert.Equal(t, routeReplica, f.r.route(ctx, sh, f.replica))
		open(f.replica)
		assert.Equal(t, routeMaster, f.r.route(ctx, sh, f.replica))
	})
	t.Run("a stale replica serves no reads", func(t *testing.T) {
		f := newRouteFixture(t, ReadFromMasterPreferred, time.Second)
		sh := f.r.shardOf("r:1")
		open(f.master)
		f.lagAnswer = 0
		assert.Equal(t, routeReplica, f.r.route(ctx, sh, f.replica), "fresh answer: usable")
		f.clk.Advance(1500 * time.Millisecond) // lag 0 + 1.5s since the answer
		f.mu.Lock()
		f.lagAnswer = 2 * time.Second
		f.mu.Unlock()
		assert.Equal(t, routeNowhere, f.r.route(ctx, sh, f.replica), "the answer ages")
	})
}

func TestReplicaReadsEvents(t *testing.T) {
	f := newRouteFixture(t, ReadFromMasterPreferred, 0)
	sh := f.r.shardOf("r:1")
	f.r.servedByReplica(sh, f.replica, 1)
	f.r.servedByReplica(sh, f.replica, 2)
	open(f.master)
	assert.Equal(t, []string{"m:1"}, f.r.readFromReplica())
	f.clk.Advance(3 * time.Second)
	f.r.servedByMaster(sh)
	f.r.servedByMaster(sh)
	require.Len(t, f.events, 3) // the breaker, then one start and one stop
	assert.Equal(t, EventReplicaReadsStarted, f.events[0].Kind)
	assert.Equal(t, "m:1", f.events[0].Addr)
	assert.Equal(t, EventBreakerOpened, f.events[1].Kind)
	assert.Equal(t, EventReplicaReadsStopped, f.events[2].Kind)
	assert.Equal(t, 3*time.Second, f.events[2].Duration)
	assert.Equal(t, uint64(3), f.replica.replicaReads.Load())
	assert.Empty(t, f.r.readFromReplica())
}

func TestIsNodeAdmin(t *testing.T) {
	for _, args := range [][]any{{"PING"}, {"cluster", "slots"}, {"COMMAND"}, {"info", "replication"}, {"readonly"}, {"asking"}, {"hello", 3}} {
		assert.True(t, isNodeAdmin(redis.NewCmd(context.Background(), args...)), args)
	}
	for _, args := range [][]any{{"get", "k"}, {"EVAL_RO", "return 1", 0}, {"mget", "a", "b"}, {[]byte("ping")}} {
		assert.False(t, isNodeAdmin(redis.NewCmd(context.Background(), args...)), args)
	}
}

// A cluster of three masters with a replica each, and a client reading with
// from; reads and writes land where ReadFrom says (INFO commandstats).
func TestReplicaReadsLandWhereReadFromSays(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1})
	ctx := testCtx(t, 60*time.Second)
	key := cl.KeyOn(t, cl.Masters[0], "rf")
	require.NoError(t, cl.Masters[0].Admin().Set(ctx, key, "v", 0).Err())
	replica := cl.Replicas[0]
	require.NoError(t, cl.Masters[0].Admin().Do(ctx, "wait", 1, 5000).Err())
	calls := func(s *redistest.Server, cmd string) int { return commandCalls(t, []*redistest.Server{s}, cmd) }

	for _, tc := range []struct {
		from          ReadFrom
		replicaServes bool
	}{{ReadFromMasterPreferred, false}, {ReadFromReplicaPreferred, true}, {ReadFromAny, false}} {
		t.Run(tc.from.String(), func(t *testing.T) {
			c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ReadFrom: tc.from})
			before := map[string]int{"get": calls(replica, "get"), "eval_ro": calls(replica, "eval_ro"), "eval": calls(replica, "eval"), "mget": calls(replica, "mget")}
			masterGets := calls(cl.Masters[0], "get")
			for range 20 {
				v, err := c.Get(ctx, key).Result()
				require.NoError(t, err)
				assert.Equal(t, "v", v)
				require.NoError(t, c.EvalRO(ctx, "return redis.call('get', KEYS[1])", []string{key}).Err())
				require.NoError(t, c.Eval(ctx, "return redis.call('get', KEYS[1])", []string{key}).Err())
				_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.MGet(ctx, key); return nil })
				require.NoError(t, err)
				_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); return nil })
				require.NoError(t, err)
				require.NoError(t, c.Set(ctx, key, "v", 0).Err())
			}
			gets, evalRO := calls(replica, "get")-before["get"], calls(replica, "eval_ro")-before["eval_ro"]
			assert.Zero(t, calls(replica, "eval")-before["eval"], "EVAL is a write")
			if tc.replicaServes {
				assert.Equal(t, 40, gets, "GETs on the replica, the EVAL_ROs' included")
				assert.Equal(t, 20, evalRO, "EVAL_ROs on the replica")
				assert.Equal(t, 20, calls(replica, "mget")-before["mget"], "read pipelines on the replica")
			} else if tc.from == ReadFromMasterPreferred {
				assert.Zero(t, gets+evalRO+calls(replica, "mget")-before["mget"], "the replica served reads while its master is healthy")
				// 20 GETs and 20 transactions' GETs.
				assert.GreaterOrEqual(t, calls(cl.Masters[0], "get")-masterGets, 40)
			}
			var served uint64
			for _, n := range c.Stats().Nodes {
				if n.Addr == replica.Addr {
					served = n.ReplicaReads
				}
			}
			if tc.replicaServes {
				assert.Equal(t, uint64(60), served)
			} else if tc.from == ReadFromMasterPreferred {
				assert.Zero(t, served)
			}
		})
	}
}
