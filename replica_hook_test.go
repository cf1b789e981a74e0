package redisguard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

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

// With ReadFromMasterPreferred and the master's breaker open, what moves to
// the replica is what COMMAND calls a read: GET, EVAL_RO and a pipeline of
// reads do; EVAL, a write, a transaction and a pipeline with a write fail
// fast with ErrNodeUnavailable naming the master.
func TestMasterPreferredMovesOnlyReads(t *testing.T) {
	sideBySide(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 15 * time.Second})
	master := cl.Masters[0]
	key := cl.KeyOn(t, master, "mp")
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, master.Admin().Set(ctx, key, "v", 0).Err())
	require.NoError(t, master.Admin().Do(ctx, "wait", 1, 5000).Err())
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ReadFrom: ReadFromMasterPreferred,
		ReadTimeout: 200 * time.Millisecond, NodeFailureThreshold: 2})
	require.NoError(t, c.Get(ctx, key).Err())
	master.Pause(t)
	t.Cleanup(func() { master.Resume(t) })
	redistest.WaitFor(t, 10*time.Second, "the master's breaker to open", func() error {
		if err := c.Set(ctx, key, "w", 0).Err(); !errors.Is(err, ErrNodeUnavailable) {
			return fmt.Errorf("SET: %v", err)
		}
		return nil
	})

	unavailable := func(t *testing.T, err error) {
		t.Helper()
		var ne *NodeError
		require.ErrorAs(t, err, &ne)
		assert.ErrorIs(t, err, ErrNodeUnavailable)
		assert.Equal(t, master.Addr, ne.Addr)
	}
	v, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	v, err = c.EvalRO(ctx, "return redis.call('get', KEYS[1])", []string{key}).Text()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); p.Exists(ctx, key); return nil })
	require.NoError(t, err)
	assert.Equal(t, "v", cmds[0].(*redis.StringCmd).Val())
	unavailable(t, c.Eval(ctx, "return redis.call('get', KEYS[1])", []string{key}).Err())
	unavailable(t, c.Set(ctx, key, "w", 0).Err())
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); return nil })
	unavailable(t, err)
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, key); p.Incr(ctx, key); return nil })
	unavailable(t, err)
	assert.Equal(t, []string{master.Addr}, c.Check(ctx, CheckOptions{}).ReadFromReplica)
}

// With ReadFromReplicaPreferred a hung replica is a node like any other: its
// breaker opens, its reads go to the master meanwhile, its probes find it
// when it answers again, and reads return to it.
func TestHungReplicaFailsOverToMasterAndRecovers(t *testing.T) {
	alone(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: 15 * time.Second})
	master, replica := cl.Masters[0], cl.Replicas[0]
	key := cl.KeyOn(t, master, "rp")
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, master.Admin().Set(ctx, key, "v", 0).Err())
	require.NoError(t, master.Admin().Do(ctx, "wait", 1, 5000).Err())
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ReadFrom: ReadFromReplicaPreferred,
		ReadTimeout: 200 * time.Millisecond, NodeFailureThreshold: 2})
	replicaState := func() NodeStats {
		for _, n := range c.Stats().Nodes {
			if n.Addr == replica.Addr {
				return n
			}
		}
		return NodeStats{}
	}
	require.NoError(t, c.Get(ctx, key).Err())
	require.Positive(t, replicaState().ReplicaReads, "a healthy replica served no read")

	replica.Pause(t)
	paused := true
	t.Cleanup(func() {
		if paused {
			replica.Resume(t)
		}
	})
	redistest.WaitFor(t, 10*time.Second, "the replica's breaker to open", func() error {
		_ = c.Get(ctx, key).Err()
		if s := replicaState().State; s != "open" {
			return fmt.Errorf("replica breaker %s", s)
		}
		return nil
	})
	reads := replicaState().ReplicaReads
	for range 50 {
		start := time.Now()
		v, err := c.Get(ctx, key).Result()
		require.NoError(t, err, "a read failed while the master could serve it")
		assert.Equal(t, "v", v)
		assert.Less(t, time.Since(start), 150*time.Millisecond, "a read waited on the hung replica")
	}
	assert.Equal(t, reads, replicaState().ReplicaReads, "the hung replica counted reads")

	replica.Resume(t)
	paused = false
	redistest.WaitFor(t, 15*time.Second, "reads to return to the replica", func() error {
		if err := c.Get(ctx, key).Err(); err != nil {
			return err
		}
		if replicaState().ReplicaReads == reads {
			return errors.New("the replica serves no reads yet")
		}
		return nil
	})
	assert.Equal(t, "closed", replicaState().State)
}
