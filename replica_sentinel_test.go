package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

// In Sentinel mode ReadFromReplicaPreferred sends reads to the replica the
// sentinels list and writes (EVAL included) to the master; ReadFromAny
// spreads reads over both.
func TestSentinelReadsLandWhereReadFromSays(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	g := redistest.StartSentinel(t)
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, g.Master.Admin().Set(ctx, "k", "v", 0).Err())
	require.NoError(t, g.Master.Admin().Do(ctx, "wait", 1, 5000).Err())
	calls := func(s *redistest.Server, cmd string) int { return commandCalls(t, []*redistest.Server{s}, cmd) }
	for _, from := range []ReadFrom{ReadFromReplicaPreferred, ReadFromAny, ReadFromNearest} {
		t.Run(from.String(), func(t *testing.T) {
			c := newTestClient(t, Config{Addrs: g.Addrs(), MasterName: g.MasterName, ReadFrom: from})
			replicaGets, masterGets := calls(g.Replica, "get"), calls(g.Master, "get")
			replicaEvals := calls(g.Replica, "eval")
			for range 40 {
				v, err := c.Get(ctx, "k").Result()
				require.NoError(t, err)
				assert.Equal(t, "v", v)
				require.NoError(t, c.Eval(ctx, "return 1", nil).Err())
				require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
			}
			onReplica, onMaster := calls(g.Replica, "get")-replicaGets, calls(g.Master, "get")-masterGets
			assert.Zero(t, calls(g.Replica, "eval")-replicaEvals, "EVAL is a write")
			if from == ReadFromReplicaPreferred {
				assert.Equal(t, 40, onReplica)
				assert.Zero(t, onMaster)
			} else if from == ReadFromAny {
				assert.Equal(t, 40, onReplica+onMaster)
				assert.Positive(t, onReplica, "no read on the replica")
				assert.Positive(t, onMaster, "no read on the master")
			} else {
				// Nearest: where depends on the two latencies, a few
				// microseconds apart here; every read lands on one of them.
				assert.Equal(t, 40, onReplica+onMaster)
			}

			// A Watch transaction's reads are the watched master's.
			replicaGets = calls(g.Replica, "get")
			require.NoError(t, c.Watch(ctx, func(tx *redis.Tx) error {
				v, err := tx.Get(ctx, "k").Result()
				if err != nil {
					return err
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, "k", v, 0); return nil })
				return err
			}, "k"))
			assert.Zero(t, calls(g.Replica, "get")-replicaGets, "a read on a Watch transaction went to the replica")
		})
	}
}

// A read a replica serves in Sentinel mode ends as any call does: at the
// caller's deadline, with the context's error, not the socket's.
func TestSentinelReplicaReadHonoursTheDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("real servers")
	}
	g := redistest.StartSentinel(t)
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, g.Master.Admin().Set(ctx, "k", "v", 0).Err())
	require.NoError(t, g.Master.Admin().Do(ctx, "wait", 1, 5000).Err())
	c := newTestClient(t, Config{Addrs: g.Addrs(), MasterName: g.MasterName, ReadFrom: ReadFromReplicaPreferred})
	require.NoError(t, c.Get(ctx, "k").Err()) // the replica is known and connected

	done := make(chan error, 1)
	go func() { done <- g.Replica.Admin().Do(context.Background(), "debug", "sleep", "1").Err() }()
	time.Sleep(50 * time.Millisecond) // the replica is asleep
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := c.Get(short, "k").Err()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "got %T %v", err, err)
	_, err = c.Pipelined(short, func(p redis.Pipeliner) error { p.Get(short, "k"); return nil })
	assert.ErrorIs(t, err, context.DeadlineExceeded, "pipeline: got %T %v", err, err)
	require.NoError(t, <-done)
}

// The replicas taken from SENTINEL REPLICAS are those no sentinel flags
// down or disconnected, each with one client, kept across answers.
func TestSentinelReplicasKeepsUsableOnes(t *testing.T) {
	cfg, err := Config{Addrs: []string{"s:26379"}, MasterName: "m", ReadFrom: ReadFromMasterPreferred}.resolve()
	require.NoError(t, err)
	k := newCore(cfg, clock.NewFake(time.Unix(1000, 0)))
	nodes := newNodeSet(k, nil, nil)
	t.Cleanup(nodes.close)
	registered := map[string]int{}
	newClient := func(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) } // never dialled
	s := newSentinelReplicas(k, nodes, nil, newClient, func(addr string, _ *redis.Client) { registered[addr]++ })
	t.Cleanup(s.close)
	answer := []map[string]string{
		{"ip": "10.0.0.1", "port": "6379", "flags": "slave"},
		{"ip": "10.0.0.2", "port": "6379", "flags": "s_down,slave"},
		{"ip": "10.0.0.3", "port": "6379", "flags": "slave,disconnected"},
		{"ip": "10.0.0.4", "port": "6379", "flags": "o_down,slave"},
		{"ip": "::1", "port": "6380", "flags": "slave"},
		{"ip": "", "port": "6379", "flags": "slave"},
	}
	s.use(answer)
	s.use(answer)
	list := *s.list.Load()
	require.Len(t, list, 2)
	assert.Equal(t, "10.0.0.1:6379", list[0].addr)
	assert.Equal(t, "[::1]:6380", list[1].addr)
	assert.Equal(t, map[string]int{"10.0.0.1:6379": 1, "[::1]:6380": 1}, registered)
}
