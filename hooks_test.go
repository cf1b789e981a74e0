package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// recorder is a go-redis hook that writes down what it sees: each command
// as "name err", each pipeline as its names joined by spaces, and dials.
type recorder struct {
	mu    sync.Mutex
	cmds  []string
	pipes []string
	dials int
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		r.dials++
		r.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.mu.Lock()
		r.cmds = append(r.cmds, cmd.Name()+" "+errText(err))
		r.mu.Unlock()
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		names := make([]string, len(cmds))
		for i, cmd := range cmds {
			names[i] = cmd.Name()
		}
		r.mu.Lock()
		r.pipes = append(r.pipes, strings.Join(names, " "))
		r.mu.Unlock()
		return err
	}
}

func (r *recorder) seen() (cmds, pipes []string, dials int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.cmds...), append([]string(nil), r.pipes...), r.dials
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds, r.pipes, r.dials = nil, nil, 0
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// count returns how many entries equal want.
func count(list []string, want string) int {
	n := 0
	for _, s := range list {
		if s == want {
			n++
		}
	}
	return n
}

// User hooks wrap the rest of the chain in the order added, the first
// outermost; one added later reaches a chain built earlier; a hook that
// returns nil leaves the step alone.
func TestUserHooksComposeInOrder(t *testing.T) {
	u := &userHooks{}
	var trail []string
	process := u.layer(true).ProcessHook(func(context.Context, redis.Cmder) error {
		trail = append(trail, "client")
		return nil
	})
	tag := func(name string) redis.Hook {
		return hookFuncs{process: func(next redis.ProcessHook) redis.ProcessHook {
			return func(ctx context.Context, cmd redis.Cmder) error {
				trail = append(trail, name)
				return next(ctx, cmd)
			}
		}}
	}
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, "ping")

	require.NoError(t, process(ctx, cmd))
	assert.Equal(t, []string{"client"}, trail, "no user hook")

	u.add(tag("first"))
	u.add(hookFuncs{}) // leaves every step alone
	u.add(tag("second"))
	trail = nil
	require.NoError(t, process(ctx, cmd))
	assert.Equal(t, []string{"first", "second", "client"}, trail)

	dials := u.layer(false).ProcessHook(func(context.Context, redis.Cmder) error { trail = append(trail, "client"); return nil })
	trail = nil
	require.NoError(t, dials(ctx, cmd))
	assert.Equal(t, []string{"client"}, trail, "a dial-only layer runs no process hook")
}

// hookFuncs is a hook made of optional functions; a missing one returns nil.
type hookFuncs struct {
	process func(redis.ProcessHook) redis.ProcessHook
}

func (h hookFuncs) DialHook(redis.DialHook) redis.DialHook { return nil }
func (h hookFuncs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.process == nil {
		return nil
	}
	return h.process(next)
}
func (h hookFuncs) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return nil
}

// The user layer costs an ordinary command no allocation, with hooks or
// without.
func TestUserLayerAllocatesNothing(t *testing.T) {
	u := &userHooks{}
	process := u.layer(true).ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	cmd := redis.NewCmd(ctx, "ping")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = process(ctx, cmd) }), "no hooks")
	u.add(hookFuncs{process: func(next redis.ProcessHook) redis.ProcessHook { return next }})
	_ = process(ctx, cmd) // builds the chain once
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = process(ctx, cmd) }), "one hook")
}

// go-redis's AutoPipeliner builds its client's hook chain again for every
// batch it sends, and for every command it sends alone: the ordinary
// client's hooks (the Standalone guard and user layer, the Cluster facade)
// allocate at most twice each to build.
func TestHookChainsBuildInTwoAllocations(t *testing.T) {
	c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}}) // never dialled
	g := c.nodes.guard("127.0.0.1:1")
	g.facade, g.user = c.fac, c.hooks.user
	process := func(context.Context, redis.Cmder) error { return nil }
	pipeline := func(context.Context, []redis.Cmder) error { return nil }
	for name, hook := range map[string]redis.Hook{"guard": g, "user layer": c.hooks.user.layer(true), "facade": facadeHook{c.fac}} {
		assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = hook.ProcessHook(process) }), 2.0, name)
		assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = hook.ProcessPipelineHook(pipeline) }), 2.0, name)
	}
}

// A hook added with AddHook, even after the first blocking call built the
// long client and its connection, sees every kind of command once, with the
// error the caller gets, and the dials of subscriptions.
func TestAddHookSeesEveryCommand(t *testing.T) {
	sideBySide(t)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		checkAddHook(t, newTestClient(t, Config{Addrs: []string{srv.Addr}}))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		checkAddHook(t, newTestClient(t, Config{Addrs: cl.Addrs(), Mode: ModeCluster}))
	})
	t.Run("sentinel", func(t *testing.T) {
		g := redistest.StartSentinel(t)
		checkAddHook(t, newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs()}))
	})
}

func checkAddHook(t *testing.T, c *Client) {
	ctx := testCtx(t, 30*time.Second)
	require.Equal(t, redis.Nil, c.BLPop(ctx, 10*time.Millisecond, "hook:{q}").Err(), "builds the long client")
	// Made before the hook: go-redis's own AddHook would not reach them,
	// since they copy the client's hooks when made.
	pipe, tx := c.Pipeline(), c.TxPipeline()
	ap, err := c.AutoPipeline()
	require.NoError(t, err)
	defer ap.Close()
	var conn *redis.Conn
	if cl, ok := c.UniversalClient.(*redis.Client); ok {
		conn = cl.Conn()
		defer conn.Close()
	}

	rec := &recorder{}
	c.AddHook(rec)

	pipe.Get(ctx, "hook:{q}:missing")
	pipe.Incr(ctx, "hook:{q}:made")
	_, err = pipe.Exec(ctx)
	require.Equal(t, redis.Nil, err)
	tx.Decr(ctx, "hook:{q}:made")
	_, err = tx.Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, "0", ap.Get(ctx, "hook:{q}:made").Val())
	if conn != nil {
		require.NoError(t, conn.Echo(ctx, "on a conn").Err())
	}
	cmds, pipes, _ := rec.seen()
	assert.Equal(t, 1, count(pipes, "get incr"), "a Pipeline made before: %q", pipes)
	assert.Equal(t, 1, count(pipes, "multi decr exec"), "a Tx made before: %q", pipes)
	assert.Equal(t, 1, count(cmds, "get ok")+count(pipes, "get"), "an AutoPipeliner made before: %q %q", cmds, pipes)
	if conn != nil {
		assert.Equal(t, 1, count(cmds, "echo ok"), "a Conn made before: %q", cmds)
	}
	rec.reset()

	require.NoError(t, c.Set(ctx, "hook:{q}:k", "v", 0).Err())
	require.Equal(t, redis.Nil, c.Get(ctx, "hook:{q}:missing").Err())
	require.NoError(t, c.RPush(ctx, "hook:{q}", "x").Err())
	require.Equal(t, []string{"hook:{q}", "x"}, c.BLPop(ctx, time.Second, "hook:{q}").Val())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	blockedErr := c.BLPop(short, 0, "hook:{q}").Err()
	cancel()
	require.ErrorIs(t, blockedErr, context.DeadlineExceeded)

	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "hook:{q}:a", "1", 0)
		p.Get(ctx, "hook:{q}:a")
		return nil
	})
	require.NoError(t, err)
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, "hook:{q}:n")
		return nil
	})
	require.NoError(t, err)
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.BLPop(ctx, 10*time.Millisecond, "hook:{q}:empty")
		return nil
	})
	require.Equal(t, redis.Nil, err, "a blocking batch")

	cmds, pipes, _ = rec.seen()
	assert.Equal(t, 1, count(cmds, "set ok"), "%q", cmds)
	assert.Equal(t, 1, count(cmds, "get redis: nil"), "%q", cmds)
	assert.Equal(t, 1, count(cmds, "blpop ok"), "%q", cmds)
	assert.Equal(t, 1, count(cmds, "blpop "+blockedErr.Error()), "the caller's error, once: %q", cmds)
	assert.Equal(t, 1, count(pipes, "set get"), "%q", pipes)
	assert.Equal(t, 1, count(pipes, "multi incr exec"), "%q", pipes)
	assert.Equal(t, 1, count(pipes, "blpop"), "%q", pipes)

	rec.reset()
	sub := c.Subscribe(ctx, "hook:{q}:ch")
	_, err = sub.Receive(ctx)
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	_, _, dials := rec.seen()
	assert.GreaterOrEqual(t, dials, 1, "the subscription's dial")
}

// instrumentAll is an extension as redisotel's are written: it hooks a
// *redis.Client directly, and a cluster's node clients as they are created.
func instrumentAll(h redis.Hook) func(redis.UniversalClient) error {
	return func(rdb redis.UniversalClient) error {
		switch rdb := rdb.(type) {
		case *redis.Client:
			rdb.AddHook(h)
		case *redis.ClusterClient:
			rdb.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
		default:
			return errors.New("not supported")
		}
		return nil
	}
}

// Instrument reaches ordinary commands, blocking ones and pipelines, on the
// clients that exist and on those built later: a dedicated connection
// opened before the call is replaced by one the extension reaches.
func TestInstrumentReachesEveryClient(t *testing.T) {
	sideBySide(t)
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
		ctx := testCtx(t, 30*time.Second)
		require.Equal(t, redis.Nil, c.BLPop(ctx, 10*time.Millisecond, "ext:q").Err(), "a dedicated connection before")
		checkInstrument(t, c)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		checkInstrument(t, newTestClient(t, Config{Addrs: cl.Addrs(), Mode: ModeCluster}))
	})
}

func checkInstrument(t *testing.T, c *Client) {
	ctx := testCtx(t, 30*time.Second)
	rec := &recorder{}
	require.NoError(t, c.Instrument(instrumentAll(rec)))

	require.NoError(t, c.Set(ctx, "ext:{q}:k", "v", 0).Err())
	require.Equal(t, redis.Nil, c.BLPop(ctx, 10*time.Millisecond, "ext:{q}").Err())
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "ext:{q}:k")
		p.Get(ctx, "ext:{q}:k")
		return nil
	})
	require.NoError(t, err)

	cmds, pipes, _ := rec.seen()
	assert.Equal(t, 1, count(cmds, "set ok"), "%q", cmds)
	assert.Equal(t, 1, count(cmds, "blpop redis: nil"), "%q", cmds)
	assert.Equal(t, 1, count(pipes, "get get"), "%q", pipes)

	failed := errors.New("extension failed")
	assert.Same(t, failed, c.Instrument(func(redis.UniversalClient) error { return failed }))
	assert.ErrorIs(t, c.Instrument(nil), ErrInvalidConfig)
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Instrument(instrumentAll(rec)), ErrClosed)
}

// InstrumentRoles names each client it hands over, and the commands
// redisguard sends itself on them (a health check's, the CLIENT UNBLOCK of a
// cancelled blocking call) are told from the service's by IsOwnCommand.
func TestInstrumentRolesTellOwnCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	var mu sync.Mutex
	var seen []string
	require.NoError(t, c.InstrumentRoles(func(rdb redis.UniversalClient, role ClientRole) error {
		rdb.(*redis.Client).AddHook(processHook(func(next redis.ProcessHook) redis.ProcessHook {
			return func(ctx context.Context, cmd redis.Cmder) error {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s %s own=%v", role, cmd.Name(), IsOwnCommand(cmd)))
				mu.Unlock()
				return next(ctx, cmd)
			}
		}))
		return nil
	}))

	require.NoError(t, c.Set(ctx, "roles:k", "v", 0).Err())
	require.True(t, c.Check(ctx, CheckOptions{WriteKey: "redisguard:health:roles"}).Healthy)
	cancelled, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.BLPop(cancelled, 5*time.Second, "roles:q").Err(), context.DeadlineExceeded)

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen, "long client own=true")
	}, 5*time.Second, 10*time.Millisecond, "the CLIENT UNBLOCK")
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{
		"ordinary set own=false",
		"ordinary ping own=true",
		"ordinary set own=true",
		"dedicated blpop own=false",
	} {
		assert.Contains(t, seen, want)
	}
	assert.ErrorIs(t, c.InstrumentRoles(nil), ErrInvalidConfig)
	assert.False(t, IsOwnCommand(redis.NewCmd(ctx, "ping")))
}

// processHook is a hook with a process step alone.
type processHook func(redis.ProcessHook) redis.ProcessHook

func (h processHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h processHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return h(next)
}
func (h processHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
