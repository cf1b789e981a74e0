package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// offlineGuard returns the node guard of a client that never dials, for the
// guard's decisions with go-redis's network replaced by a stub.
func offlineGuard(t *testing.T, mode Mode) nodeGuard {
	c, err := NewClient(Config{Mode: mode, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.nodes.guard("127.0.0.1:1")
}

// failsOnce stands in for go-redis below the guard: it counts its calls in
// *calls and fails the first one with cause.
func failsOnce(cause error, calls *int) func() error {
	return func() error {
		*calls++
		if *calls == 1 {
			return cause
		}
		return nil
	}
}

// The node guard's decision, with go-redis's network replaced by a stub: an
// unrepeatable command whose connection failed after the write ends with
// ErrOutcomeUnknown, once; failures that prove the command did not run
// leave it repeatable, and a reset is retried once, in every mode. The
// error wraps the network's for the caller; on a cluster node client,
// where go-redis's cluster loop gets it first, it shows that loop nothing
// it would retry.
func TestUnrepeatableCommandsAreNotRetried(t *testing.T) {
	ctx := context.Background()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	brokenWrite := &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	for _, mode := range []Mode{ModeStandalone, ModeCluster} {
		guard := offlineGuard(t, mode)
		for _, tc := range []struct {
			name    string
			cause   error
			cmd     []any
			unknown bool
		}{
			{"reset RPUSH", reset, []any{"rpush", "q", "x"}, true},
			{"EOF INCR", io.EOF, []any{"incr", "n"}, true},
			{"timeout SET NX", timeout, []any{"set", "lock", "me", "nx"}, true},
			{"reset SET", reset, []any{"set", "k", "v"}, false},
			{"failed write RPUSH", brokenWrite, []any{"rpush", "q", "x"}, false},
		} {
			t.Run(mode.String()+"/"+tc.name, func(t *testing.T) {
				calls := 0
				next := failsOnce(tc.cause, &calls)
				process := guard.ProcessHook(func(context.Context, redis.Cmder) error { return next() })
				err := process(ctx, redis.NewCmd(ctx, tc.cmd...))
				if !tc.unknown {
					assert.Equal(t, 2, calls, "retried once")
					assert.NoError(t, err)
					return
				}
				assert.Equal(t, 1, calls, "sent once")
				require.ErrorIs(t, err, ErrOutcomeUnknown)
				var ne *NodeError
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, "127.0.0.1:1", ne.Addr)
				assert.Contains(t, err.Error(), tc.cause.Error(), "the cause is quoted")
				assert.ErrorIs(t, ne, tc.cause, "the caller's error wraps the cause")
				if mode != ModeCluster {
					return
				}
				// What go-redis's shouldRetry looks for: none of it may show.
				var netErr net.Error
				assert.False(t, errors.As(err, &netErr), "a net.Error shows through")
				assert.False(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "the cause shows through")
			})
		}
	}
}

// The case itself, on a real server: the proxy lets an RPUSH through and
// resets the connection instead of delivering the reply. go-redis alone
// retries and pushes the item twice; redisguard pushes it once and says the
// outcome is unknown. A SET, which is safe to repeat, is retried.
func TestLostReplyDoesNotRepeatRPush(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	defer proxy.Close()
	ctx := testCtx(t, 20*time.Second)

	stock := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer stock.Close()
	guarded := newTestClient(t, Config{Addrs: []string{proxy.Addr()}})
	length := func(key string) int64 {
		n, err := srv.Admin().LLen(ctx, key).Result()
		require.NoError(t, err)
		return n
	}

	require.NoError(t, stock.Ping(ctx).Err()) // a pooled connection through the proxy
	require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
	require.NoError(t, stock.RPush(ctx, "queue:go-redis", "item").Err(), "go-redis retried the reset")
	assert.Equal(t, int64(2), length("queue:go-redis"), "go-redis alone pushes the item twice")

	require.NoError(t, guarded.Ping(ctx).Err())
	require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
	err = guarded.RPush(ctx, "queue:redisguard", "item").Err()
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	assert.Contains(t, err.Error(), "RPUSH may have run")
	assert.Equal(t, int64(1), length("queue:redisguard"), "redisguard pushes it once")
	assert.Equal(t, uint64(1), guarded.Stats().Nodes[0].OutcomeUnknown)

	require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
	require.NoError(t, guarded.Set(ctx, "k", "v", 0).Err(), "a SET is retried after the reset")
	got, err := srv.Admin().Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	assert.Equal(t, "closed", guarded.Stats().Nodes[0].State, "a lost reply is no node failure")
}

// In Standalone mode the reset retry resends a batch as a whole, so a batch
// holding an unrepeatable command is not resent; one of repeatable commands
// is.
func TestBatchWithUnrepeatableCommandIsNotResent(t *testing.T) {
	guard := offlineGuard(t, ModeStandalone)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		cmds  []redis.Cmder
		calls int
	}{
		{"SET and GET", []redis.Cmder{redis.NewStatusCmd(ctx, "set", "k", "v"), redis.NewStringCmd(ctx, "get", "k")}, 2},
		{"SET and RPUSH", []redis.Cmder{redis.NewStatusCmd(ctx, "set", "k", "v"), redis.NewIntCmd(ctx, "rpush", "q", "x")}, 1},
	} {
		calls := 0
		next := failsOnce(io.EOF, &calls)
		pipeline := guard.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return next() })
		_ = pipeline(ctx, tc.cmds)
		assert.Equal(t, tc.calls, calls, tc.name)
	}
}

// Each of these commands answers differently, or changes the data again,
// when it runs a second time. Through a proxy that lets the server run it and
// loses the reply, redisguard must not send it again: the caller gets
// ErrOutcomeUnknown and the data shows exactly one run.
func TestLostReplyDoesNotRepeatUnsafeCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	defer proxy.Close()
	ctx := testCtx(t, 30*time.Second)
	guarded := newTestClient(t, Config{Addrs: []string{proxy.Addr()}})
	admin := srv.Admin()
	db1 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	defer db1.Close()

	for _, tc := range []struct {
		name  string
		setup func() error
		run   func() error
		check func(t *testing.T)
	}{
		{
			name: "ZADD INCR counts once",
			run: func() error {
				return guarded.ZAddArgsIncr(ctx, "zincr", redis.ZAddArgs{Members: []redis.Z{{Score: 1, Member: "m"}}}).Err()
			},
			check: func(t *testing.T) { assert.Equal(t, 1.0, admin.ZScore(ctx, "zincr", "m").Val()) },
		},
		{
			name:  "ZADD NX does not answer that the member existed",
			run:   func() error { return guarded.ZAddNX(ctx, "znx", redis.Z{Score: 1, Member: "m"}).Err() },
			check: func(t *testing.T) { assert.Equal(t, 1.0, admin.ZScore(ctx, "znx", "m").Val()) },
		},
		{
			name:  "SMOVE does not answer that it moved nothing",
			setup: func() error { return admin.SAdd(ctx, "{s}from", "m").Err() },
			run:   func() error { return guarded.SMove(ctx, "{s}from", "{s}to", "m").Err() },
			check: func(t *testing.T) { assert.True(t, admin.SIsMember(ctx, "{s}to", "m").Val()) },
		},
		{
			name:  "COPY does not answer that it copied nothing",
			setup: func() error { return admin.Set(ctx, "{c}src", "v", 0).Err() },
			run:   func() error { return guarded.Copy(ctx, "{c}src", "{c}dst", 0, false).Err() },
			check: func(t *testing.T) { assert.Equal(t, "v", admin.Get(ctx, "{c}dst").Val()) },
		},
		{
			name:  "MOVE does not answer that it moved nothing",
			setup: func() error { return admin.Set(ctx, "moved", "v", 0).Err() },
			run:   func() error { return guarded.Move(ctx, "moved", 1).Err() },
			check: func(t *testing.T) { assert.Equal(t, "v", db1.Get(ctx, "moved").Val()) },
		},
		{
			name:  "LMOVE onto the same list rotates once",
			setup: func() error { return admin.RPush(ctx, "ring", "a", "b", "c").Err() },
			run:   func() error { return guarded.LMove(ctx, "ring", "ring", "LEFT", "RIGHT").Err() },
			check: func(t *testing.T) { assert.Equal(t, []string{"b", "c", "a"}, admin.LRange(ctx, "ring", 0, -1).Val()) },
		},
		{
			name:  "RPOPLPUSH onto the same list rotates once",
			setup: func() error { return admin.RPush(ctx, "ring2", "a", "b", "c").Err() },
			run:   func() error { return guarded.RPopLPush(ctx, "ring2", "ring2").Err() },
			check: func(t *testing.T) { assert.Equal(t, []string{"c", "a", "b"}, admin.LRange(ctx, "ring2", 0, -1).Val()) },
		},
		{
			name:  "SET NX given as bytes does not answer that the key was taken",
			run:   func() error { return guarded.Do(ctx, "SET", "lock", "me", []byte("NX")).Err() },
			check: func(t *testing.T) { assert.Equal(t, "me", admin.Get(ctx, "lock").Val()) },
		},
		{
			name:  "EXPIRE NX does not answer that a TTL was set already",
			setup: func() error { return admin.Set(ctx, "ttl", "v", 0).Err() },
			run:   func() error { return guarded.ExpireNX(ctx, "ttl", time.Hour).Err() },
			check: func(t *testing.T) { assert.Greater(t, admin.TTL(ctx, "ttl").Val(), time.Duration(0)) },
		},
		{
			name:  "SADD does not answer that the member existed",
			run:   func() error { return guarded.SAdd(ctx, "seen", "id-1").Err() },
			check: func(t *testing.T) { assert.True(t, admin.SIsMember(ctx, "seen", "id-1").Val()) },
		},
		{
			name:  "DEL does not answer that it deleted nothing",
			setup: func() error { return admin.Set(ctx, "gone", "v", 0).Err() },
			run:   func() error { return guarded.Del(ctx, "gone").Err() },
			check: func(t *testing.T) { assert.Zero(t, admin.Exists(ctx, "gone").Val()) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				require.NoError(t, tc.setup())
			}
			require.NoError(t, guarded.Ping(ctx).Err()) // a pooled connection through the proxy
			require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
			err := tc.run()
			require.ErrorIs(t, err, ErrOutcomeUnknown, "the command was answered as if it had run once")
			tc.check(t)
		})
	}
}

// The other side of the rule: a command that is safe to run twice is sent
// again after its reply was lost, and the caller gets its answer.
func TestLostReplyRepeatsSafeCommands(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy, err := faultproxy.New(srv.Addr)
	require.NoError(t, err)
	defer proxy.Close()
	ctx := testCtx(t, 30*time.Second)
	guarded := newTestClient(t, Config{Addrs: []string{proxy.Addr()}})
	admin := srv.Admin()
	require.NoError(t, admin.RPush(ctx, "{q}src", "a", "b", "c", "d").Err())
	require.NoError(t, admin.Set(ctx, "ttl", "v", 0).Err())

	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"SET EX", func() error { return guarded.Set(ctx, "k", "v", time.Minute).Err() }},
		{"MSET", func() error { return guarded.MSet(ctx, "a", "1", "b", "2").Err() }},
		{"EXPIRE", func() error { return guarded.Expire(ctx, "ttl", time.Hour).Err() }},
		{"GET", func() error { return guarded.Get(ctx, "k").Err() }},
		// A pop whose reply was lost took an element nobody can read back;
		// the retry takes the next, as the caller's own retry would.
		{"LPOP", func() error {
			v, err := guarded.LPop(ctx, "{q}src").Result()
			assert.Equal(t, "b", v, "a was taken by the lost run")
			return err
		}},
		{"LMOVE onto another list", func() error {
			v, err := guarded.LMove(ctx, "{q}src", "{q}dst", "LEFT", "RIGHT").Result()
			assert.Equal(t, "d", v)
			assert.Equal(t, []string{"c", "d"}, admin.LRange(ctx, "{q}dst", 0, -1).Val(), "the lost run's element is kept")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, guarded.Ping(ctx).Err())
			require.NoError(t, proxy.SetMode(faultproxy.LoseOneReply))
			require.NoError(t, tc.run(), "not retried after the lost reply")
		})
	}
	assert.Zero(t, guarded.Stats().Nodes[0].OutcomeUnknown)
}

// A blocking batch runs on a dedicated connection, which is replaced once
// when the server has dropped it; that replacement resends the batch only if
// it may be repeated. Here the server kills the connection while the batch's
// BLPOP waits, after its INCR ran: resent, the INCR would count twice. A
// batch that is safe to repeat is still resent.
func TestBlockingBatchWithUnrepeatableCommandIsNotResent(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, MaxLongConnections: 1})
	ctx := testCtx(t, 30*time.Second)
	require.Equal(t, redis.Nil, shortBLPop(ctx, c, "resend:warm")) // the one dedicated connection, now idle

	killBlocked := func() {
		waitBlocked(t, srv, 1)
		list, err := srv.Admin().ClientList(ctx).Result()
		require.NoError(t, err)
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " cmd=blpop ") {
				id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
				require.NoError(t, srv.Admin().Do(ctx, "client", "kill", "id", id).Err())
				return
			}
		}
		t.Fatal("no blocked client to kill")
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "resend:n")
			p.BLPop(ctx, 2*time.Second, "resend:q")
			return nil
		})
		done <- err
	}()
	killBlocked()
	err := <-done
	require.Error(t, err)
	assert.True(t, isConnReset(err), "the batch keeps its network error: %v", err)
	n, err := srv.Admin().Get(ctx, "resend:n").Int()
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the INCR ran twice: the batch was resent")

	go func() {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Get(ctx, "resend:n")
			p.BLPop(ctx, 2*time.Second, "resend:q")
			return nil
		})
		done <- err
	}()
	killBlocked()
	waitBlocked(t, srv, 1) // resent on a fresh connection
	require.NoError(t, srv.Admin().RPush(ctx, "resend:q", "x").Err())
	assert.NoError(t, <-done, "a repeatable batch is resent after the reset")
}

// sentOnce keeps, across go-redis's attempts at a batch, the commands not
// safe to repeat that may have run, and the guard leaves them out.
func TestSentOnce(t *testing.T) {
	ctx := context.Background()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	answered := redis.NewIntCmd(ctx, "incr", "a") // ran: answered before the batch failed
	answered.SetVal(1)
	lost := redis.NewIntCmd(ctx, "incr", "b") // may have run: its reply was lost
	lost.SetErr(timeout)
	unwritten := redis.NewIntCmd(ctx, "incr", "c") // did not run: the write failed
	unwritten.SetErr(&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE})
	moved := redis.NewIntCmd(ctx, "incr", "d") // redirected, now or in an attempt before this one
	moved.SetErr(redisErr("MOVED 1 127.0.0.1:7001"))
	get := redis.NewStringCmd(ctx, "get", "e") // safe to send again
	get.SetErr(timeout)
	batch := []redis.Cmder{answered, lost, unwritten, moved, get}

	var s sentOnce
	assert.False(t, s.pending())
	// The batch's connection failed: a MOVED on a command may be an earlier
	// attempt's (go-redis stamps the failure only on commands without an
	// error), so the command may have run this time.
	s.note(ctx, batch, timeout, false)
	assert.True(t, s.pending())
	again, left := s.unsent(batch)
	assert.True(t, left)
	assert.Equal(t, []redis.Cmder{unwritten, get}, again)
	s.forget(batch...)

	// The batch was answered, its first command TRYAGAIN: the MOVED is
	// this attempt's, and the redirected command did not run.
	s.note(ctx, batch, redisErr("TRYAGAIN Multiple keys request during rehashing of slot"), false)
	again, left = s.unsent(batch)
	assert.True(t, left)
	assert.Equal(t, []redis.Cmder{unwritten, moved, get}, again)

	tx := []redis.Cmder{redis.NewStatusCmd(ctx, "multi"), answered, redis.NewSliceCmd(ctx, "exec")}
	again, left = s.unsent(tx)
	assert.False(t, left, "a transaction is never split")
	assert.Equal(t, tx, again)

	again, left = s.unsent([]redis.Cmder{answered, lost})
	assert.True(t, left)
	assert.Empty(t, again)

	s.forget(batch...)
	assert.False(t, s.pending())
	again, left = s.unsent(batch)
	assert.False(t, left)
	assert.Equal(t, batch, again)

	// A closed client's failures say nothing about the server.
	s.note(ctx, []redis.Cmder{lost}, timeout, true)
	assert.False(t, s.pending())
}

func TestCallerErrorIsTyped(t *testing.T) {
	n := &node{addr: "127.0.0.1:7000", unavailable: &NodeError{Addr: "127.0.0.1:7000", Err: ErrNodeUnavailable},
		exhausted: &NodeError{Addr: "127.0.0.1:7000", Err: ErrPoolExhausted}}
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	incr := redis.NewIntCmd(live, "incr", "n")
	tests := []struct {
		name         string
		ctx          context.Context
		err          error
		cut, unknown bool
		is           error
	}{
		{"unsafe and may have run", live, timeout, false, true, ErrOutcomeUnknown},
		{"a timeout", live, timeout, false, false, ErrNodeFailed},
		{"a reset", live, io.EOF, false, false, ErrNodeFailed},
		{"a refused dial", live, setupFailure(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false), false, false, ErrNodeFailed},
		{"cut by the breaker", live, net.ErrClosed, true, false, ErrNodeUnavailable},
		{"a pool timeout", live, redis.ErrPoolTimeout, false, false, ErrPoolExhausted},
		{"the caller gave up", gone, timeout, false, false, os.ErrDeadlineExceeded},
		{"go-redis closed the node client", live, redis.ErrClosed, false, false, redis.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := n.callerError(tt.ctx, incr, tt.err, tt.cut, tt.unknown)
			require.ErrorIs(t, err, tt.is)
			var ne *NodeError
			if errors.As(err, &ne) && ne.cause != nil {
				// The caller sees the network's error; go-redis's cluster
				// loop, which gets it sealed, sees nothing it would retry.
				assert.ErrorIs(t, err, withoutSetup(tt.err))
				var netErr net.Error
				assert.False(t, errors.As(sealed{ne}, &netErr), "go-redis's loops would take %v for a network error", err)
				assert.False(t, isConnReset(sealed{ne}), "go-redis's loops would take %v for a reset", err)
				assert.ErrorIs(t, sealed{ne}, tt.is)
			}
			if tt.is == ErrNodeUnavailable || tt.is == ErrOutcomeUnknown || tt.is == ErrNodeFailed {
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, n.addr, ne.Addr)
			}
		})
	}
}
