package redisguard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

func TestOutcome(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want breaker.Outcome
	}{
		{"success", live, nil, breaker.Success},
		{"nil reply is an answer", live, redis.Nil, breaker.Success},
		{"WRONGTYPE is an answer", live, redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), breaker.Success},
		{"OOM is an answer", live, redisErr("OOM command not allowed when used memory > 'maxmemory'."), breaker.Success},
		{"READONLY is an answer", live, redisErr("READONLY You can't write against a read only replica."), breaker.Success},
		{"MOVED is an answer", live, redisErr("MOVED 3999 127.0.0.1:6381"), breaker.Success},
		{"caller cancelled", cancelled, timeout, breaker.Neutral},
		{"pool timeout", live, redis.ErrPoolTimeout, breaker.Neutral},
		{"client closed", live, redis.ErrClosed, breaker.Neutral},
		{"reset: EOF", live, io.EOF, breaker.Neutral},
		{"reset: ECONNRESET", live, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, breaker.Neutral},
		{"reset: broken pipe", live, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, breaker.Neutral},
		{"dial refused", live, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, breaker.Failure},
		{"reset of a fresh connection before any answer", live, setupFailure(io.EOF, false), breaker.Failure},
		{"reset of a fresh connection after HELLO was answered", live, setupFailure(io.EOF, true), breaker.Neutral},
		{"caller cancelled while setting up a connection", cancelled, setupFailure(timeout, false), breaker.Neutral},
		{"read timeout", live, timeout, breaker.Failure},
		{"wrapped read timeout", live, fmt.Errorf("ctx: %w", timeout), breaker.Failure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, outcome(tt.ctx, tt.err))
		})
	}
}

// redisErr builds an error reply: go-redis recognises replies by their
// RedisError method.
func redisErr(msg string) error { return redisReplyError(msg) }

type redisReplyError string

func (e redisReplyError) Error() string { return string(e) }
func (redisReplyError) RedisError()     {}

// dialCounter counts dials made by a client, to prove fail-fast opens nothing.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}
func (d *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestBreakerOpensOnDeadNodeAndFailsFast(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 3, NodeRecoveryTime: time.Hour,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	dials := &dialCounter{}
	c.AddHook(dials)
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	srv.Kill(t)
	for i := range 3 {
		err := c.Get(ctx, "k").Err()
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrNodeUnavailable, "call %d failed fast before the threshold", i)
	}
	dialsBefore := dials.n.Load()
	start := time.Now()
	err := c.Get(ctx, "k").Err()
	assert.Less(t, time.Since(start), 50*time.Millisecond)
	require.ErrorIs(t, err, ErrNodeUnavailable)
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, srv.Addr, ne.Addr)
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); return nil })
	assert.ErrorIs(t, err, ErrNodeUnavailable)
	assert.Equal(t, dialsBefore, dials.n.Load(), "an open breaker dialled")

	st := c.Stats()
	require.Len(t, st.Nodes, 1)
	assert.Equal(t, "open", st.Nodes[0].State)
	assert.Equal(t, uint64(1), st.Nodes[0].Opens)
	assert.False(t, st.Nodes[0].LastTransition.IsZero())
}

// A half-open probe usually needs a fresh connection, whose handshake (HELLO,
// CLIENT SETINFO) runs through the same node hook. The breaker must let the
// handshake through, or the probe fails on its own gate and the breaker never
// closes: a bug the paused-master scenario found.
func TestBreakerRecoversThroughFreshConnection(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: 1, NodeRecoveryTime: 300 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	srv.Pause(t)
	require.Error(t, c.Get(ctx, "k").Err()) // times out: the breaker opens and the connection is discarded
	require.ErrorIs(t, c.Get(ctx, "k").Err(), ErrNodeUnavailable)
	srv.Resume(t)

	require.Eventually(t, func() bool { return c.Get(ctx, "k").Val() == "v" }, 5*time.Second, 50*time.Millisecond,
		"the breaker never let a probe through to the resumed server")
	assert.Equal(t, "closed", c.Stats().Nodes[0].State)
}

func TestBreakerDisabled(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, NodeFailureThreshold: -1, DialTimeout: 100 * time.Millisecond})
	ctx := testCtx(t, 20*time.Second)
	srv.Kill(t)
	for range 10 {
		err := c.Get(ctx, "k").Err()
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNodeUnavailable)
	}
	assert.Equal(t, "closed", c.Stats().Nodes[0].State)
}

// Killing every pooled connection of a healthy node at once (CLIENT KILL)
// is not a dead node: each command is retried once on the same node and the
// breaker stays closed, even with a threshold of one.
func TestConnectionResetsDoNotOpenBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxConnections: 20, NodeFailureThreshold: 1})
	ctx := testCtx(t, 20*time.Second)

	burst := func() []error {
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = c.Set(ctx, fmt.Sprintf("reset:%d", i), i, 0).Err()
			}()
		}
		wg.Wait()
		return errs
	}
	for _, err := range burst() {
		require.NoError(t, err)
	}
	pooled := c.PoolStats().TotalConns
	require.Greater(t, pooled, uint32(1), "the burst did not fill the pool")

	killed, err := srv.Admin().ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, killed, int64(pooled))

	for _, err := range burst() {
		assert.NoError(t, err)
	}
	n := c.Stats().Nodes[0]
	assert.Equal(t, "closed", n.State)
	assert.Zero(t, n.Opens)
}

// In a cluster, breakers are per node: a pipeline spanning every master
// fails only the commands for the node whose breaker is open.
func TestBreakerIsolationAcrossNodes(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	keys := clusterKeys(t, cl, 5)
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), NodeFailureThreshold: 1, NodeRecoveryTime: time.Hour,
		ReadTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Get(ctx, keys[0][0]).Err())

	cl.Masters[0].Pause(t)
	require.Error(t, c.Get(ctx, keys[0][0]).Err())
	require.ErrorIs(t, c.Get(ctx, keys[0][0]).Err(), ErrNodeUnavailable)

	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range keys {
			for _, k := range g {
				p.Get(ctx, k)
			}
		}
		return nil
	})
	require.Error(t, err)
	for i, cmd := range cmds {
		if i < len(keys[0]) {
			assert.ErrorIs(t, cmd.Err(), ErrNodeUnavailable, "command %v", cmd.Args())
		} else {
			assert.NoError(t, cmd.Err(), "command %v for a healthy node", cmd.Args())
		}
	}
	for _, n := range c.Stats().Nodes {
		if n.Addr == cl.Masters[0].Addr {
			assert.Equal(t, "open", n.State)
		} else {
			assert.Equal(t, "closed", n.State, n.Addr)
		}
	}
	cl.Masters[0].Resume(t)
}

func TestErrNodeUnavailableIsNotRetriedElsewhere(t *testing.T) {
	// An open breaker answers in microseconds; if go-redis retried it on
	// other nodes with backoff, the call would take tens of milliseconds.
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	keys := clusterKeys(t, cl, 1)
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), NodeFailureThreshold: 1, NodeRecoveryTime: time.Hour,
		ReadTimeout: 300 * time.Millisecond})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Get(ctx, keys[0][0]).Err())
	cl.Masters[0].Pause(t)
	defer cl.Masters[0].Resume(t)
	require.Error(t, c.Get(ctx, keys[0][0]).Err())
	before := commandCalls(t, cl.Masters[1:], "get")
	for range 20 {
		start := time.Now()
		err := c.Get(ctx, keys[0][0]).Err()
		require.True(t, errors.Is(err, ErrNodeUnavailable), "got %v", err)
		assert.Less(t, time.Since(start), 5*time.Millisecond)
	}
	assert.Equal(t, before, commandCalls(t, cl.Masters[1:], "get"), "the command was sent to another node")
}

// BenchmarkNodeGuard measures the breaker's cost per command: the node hook
// around a no-op next, with the breaker closed.
func BenchmarkNodeGuard(b *testing.B) {
	c, err := NewClient(Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(b, err)
	defer c.Close()
	hook := c.nodes.guard("127.0.0.1:1").ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", "key")
	b.ReportAllocs()
	for b.Loop() {
		_ = hook(ctx, cmd)
	}
}

// The reset retry repeats a command once on the same node, unless the
// command is marked NoRetry (go-redis's per-command switch, which the
// health probe uses): then the reset is the answer.
func TestResetRetryHonoursNoRetry(t *testing.T) {
	guard := offlineGuard(t, ModeStandalone)
	ctx := context.Background()
	calls := 0
	next := failsOnce(io.EOF, &calls)
	resetOnce := func(context.Context, redis.Cmder) error { return next() }
	process := guard.ProcessHook(resetOnce)

	require.NoError(t, process(ctx, redis.NewStatusCmd(ctx, "set", "k", "v")))
	assert.Equal(t, 2, calls, "an ordinary command is retried once after a reset")

	calls = 0
	err := process(ctx, oneShot{redis.NewCmd(ctx, "set", "k", "v")})
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, 1, calls, "a NoRetry command is not repeated")

	calls = 0
	pipeline := guard.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return resetOnce(ctx, nil) })
	assert.ErrorIs(t, pipeline(ctx, []redis.Cmder{redis.NewStatusCmd(ctx, "set", "a", "1"), oneShot{redis.NewCmd(ctx, "set", "k", "v")}}), io.EOF)
	assert.Equal(t, 1, calls, "a batch holding a NoRetry command is not repeated")
}

// A node that accepts connections and closes them at once (a proxy whose
// backend is gone) is failing, though each failure shows as a reset: a
// connection that never completed a command was not dropped by a healthy
// server's routine. Its breaker opens at the threshold: two GETs, each
// retried once after its reset, and no connection after that.
func TestNodeThatHangsUpOnConnectOpensBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	defer proxy.Close()
	require.NoError(t, proxy.SetMode(faultproxy.Hangup))
	c := newTestClient(t, Config{Addrs: []string{proxy.Addr()}, NodeFailureThreshold: 2})
	ctx := testCtx(t, 20*time.Second)

	var errs []error
	for range 10 {
		errs = append(errs, c.Get(ctx, "k").Err())
	}
	for i, err := range errs[:2] {
		assert.ErrorIs(t, err, io.EOF, "GET %d", i)
	}
	for i, err := range errs[2:] {
		assert.ErrorIs(t, err, ErrNodeUnavailable, "GET %d", i+2)
	}
	assert.Equal(t, "open", c.Stats().Nodes[0].State)
	// Besides the recovery probes, which use connections of their own, the
	// 10 GETs cost 4 connections: two each for the first two, none once the
	// breaker was open. Probes still in flight are not counted yet.
	probes := int(c.Stats().Nodes[0].Probes)
	accepted := proxy.Stats().Accepted
	assert.GreaterOrEqual(t, accepted-probes, 4, "connections the proxy accepted for 10 GETs, less the probes")
	assert.LessOrEqual(t, accepted-probes, 4+maxProbesInFlight, "connections the proxy accepted for 10 GETs, less the probes")
}

// A command that needed a fresh connection whose set-up failed (the
// handshake timed out, or the TLS handshake did) was never written: it is
// not reported as ErrOutcomeUnknown, even when it is not safe to repeat,
// and the node is charged with the failure.
func TestFailedConnectionSetUpIsNotOutcomeUnknown(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		name string
		tls  *tls.Config
	}{
		{"HELLO", nil},
		{"TLS", &tls.Config{InsecureSkipVerify: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, err := faultproxy.New(srv.Addr)
			require.NoError(t, err)
			defer proxy.Close()
			require.NoError(t, proxy.SetMode(faultproxy.Blackhole))
			c := newTestClient(t, Config{Addrs: []string{proxy.Addr()}, TLSConfig: tc.tls,
				DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
				NodeFailureThreshold: 2, NodeRecoveryTime: time.Hour,
				HungNodeAfter: time.Minute}) // the timeouts, not the silence, open the breaker here
			ctx := testCtx(t, 20*time.Second)

			for i := range 2 {
				err := c.Incr(ctx, "setup:n").Err()
				require.Error(t, err)
				assert.NotErrorIs(t, err, ErrOutcomeUnknown, "INCR %d", i)
				var netErr net.Error
				assert.True(t, errors.As(err, &netErr) && netErr.Timeout(), "INCR %d: %v, want the timeout", i, err)
			}
			assert.ErrorIs(t, c.Incr(ctx, "setup:n").Err(), ErrNodeUnavailable)
			assert.Zero(t, c.Stats().Nodes[0].OutcomeUnknown)
		})
	}
}

func TestBatchAnswered(t *testing.T) {
	assert.True(t, batchAnswered(nil))
	assert.True(t, batchAnswered(redis.Nil))
	assert.True(t, batchAnswered(redis.TxFailedErr))
	mr := miniredis.RunT(t)
	mr.Lpush("list", "x")
	cl := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer cl.Close()
	wrongType := cl.Get(context.Background(), "list").Err()
	require.Error(t, wrongType)
	assert.True(t, batchAnswered(wrongType), "an error reply is an answer: %v", wrongType)

	assert.False(t, batchAnswered(&net.OpError{Op: "read", Err: syscall.ECONNRESET}))
	assert.False(t, batchAnswered(context.DeadlineExceeded))
	assert.False(t, batchAnswered(redis.ErrClosed))
	assert.False(t, batchAnswered(redis.ErrPoolTimeout))
	assert.False(t, batchAnswered(ErrNodeUnavailable))
}

// When a node's breaker opens, every command waiting on it is answered at
// once, not at ReadTimeout: those on its connections (a read that may have
// run ends ErrNodeUnavailable, an unsafe command ErrOutcomeUnknown), and
// those queued for a connection, which were never sent (ErrNodeUnavailable).
// Nothing is sent again.
func TestOpeningBreakerAnswersEveryoneWaiting(t *testing.T) {
	srv := redistest.StartServer(t)
	events := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxConnections: 4, OnEvent: events.onEvent})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Set(ctx, "wait:n", 0, 0).Err())
	fillPool(ctx, t, c)

	srv.Pause(t)
	paused := time.Now()
	type result struct {
		incr bool
		err  error
		took time.Duration
	}
	results := make(chan result, 16)
	for i := range 16 {
		go func() {
			start := time.Now()
			var err error
			if i%2 == 0 {
				err = c.Incr(ctx, "wait:n").Err()
			} else {
				err = c.Get(ctx, "wait:n").Err()
			}
			results <- result{i%2 == 0, err, time.Since(start)}
		}()
	}
	var unknown int
	for range 16 {
		r := <-results
		assert.Less(t, r.took, DefaultReadTimeout/2, "a caller waited for ReadTimeout: %v", r.err)
		require.Error(t, r.err)
		if r.incr && errors.Is(r.err, ErrOutcomeUnknown) {
			unknown++
			continue
		}
		assert.ErrorIs(t, r.err, ErrNodeUnavailable, "incr=%v", r.incr)
		assert.NotErrorIs(t, r.err, ErrOutcomeUnknown)
	}
	// The event is delivered on the goroutine that opened the breaker, which
	// may report it after the callers it cut loose have returned.
	var opened []Event
	require.Eventually(t, func() bool {
		opened = events.find(EventBreakerOpened, func(Event) bool { return true })
		return len(opened) > 0
	}, 5*time.Second, time.Millisecond, "the breaker to report opening")
	require.Len(t, opened, 1)
	assert.Equal(t, DecisionSilent, opened[0].Decision)
	t.Logf("breaker opened %s after the pause; %d INCRs ended with ErrOutcomeUnknown", opened[0].Time.Sub(paused), unknown)
	assert.LessOrEqual(t, unknown, 4, "more INCRs may have run than there are connections")

	srv.Resume(t)
	redistest.WaitFor(t, 10*time.Second, "the node to serve again", func() error { return c.Set(ctx, "wait:probe", 1, 0).Err() })
	n, err := c.Get(ctx, "wait:n").Int()
	require.NoError(t, err)
	// The INCRs on the wire ran once each when the server resumed, or not
	// at all; none was sent twice, and none that was refused ran.
	assert.LessOrEqual(t, n, unknown)
}

// The facade's ride-out sends a refused command through the node guard
// again, in every mode: each attempt is admitted afresh, so a breaker that
// opened meanwhile refuses the next one, which never reaches the node. The
// same holds for a batch.
func TestRideOutAttemptIsAdmittedAfresh(t *testing.T) {
	const addr = "127.0.0.1:1" // never dialled
	ctx := testCtx(t, 5*time.Second)
	loading := redisErr("LOADING Redis is loading the dataset in memory")
	for _, tc := range []struct {
		name string
		send func(g nodeGuard, next func()) error
	}{
		{"command", func(g nodeGuard, next func()) error {
			process := g.ProcessHook(func(context.Context, redis.Cmder) error { next(); return loading })
			return process(ctx, redis.NewStringCmd(ctx, "get", "k"))
		}},
		{"batch", func(g nodeGuard, next func()) error {
			pipeline := g.ProcessPipelineHook(func(_ context.Context, cmds []redis.Cmder) error {
				next()
				return failBatch(cmds, loading)
			})
			return pipeline(ctx, []redis.Cmder{redis.NewStringCmd(ctx, "get", "k")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{addr}})
			g := c.nodes.guard(addr)
			g.facade, g.user = c.fac, c.hooks.user // as the ordinary client carries it
			n := g.n
			var sent int
			err := tc.send(g, func() {
				sent++
				require.True(t, n.br.Trip(), "the breaker did not open") // between the attempts
			})
			assert.Equal(t, 1, sent, "the ride-out's attempt passed an open breaker")
			assert.ErrorIs(t, err, ErrNodeUnavailable)
			var ne *NodeError
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, addr, ne.Addr)
		})
	}
}
