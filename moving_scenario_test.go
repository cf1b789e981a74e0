package redisguard

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// movingFrame is MOVING as a server sends it: seq, the seconds by which
// the old endpoint goes away, and the new endpoint ("" sends null).
func movingFrame(seq, secs int, to string) []byte {
	f := ">4\r\n$6\r\nMOVING\r\n:" + strconv.Itoa(seq) + "\r\n:" + strconv.Itoa(secs) + "\r\n"
	if to == "" {
		return append([]byte(f), "_\r\n"...)
	}
	return []byte(f + "$" + strconv.Itoa(len(to)) + "\r\n" + to + "\r\n")
}

// movingSetup is a server behind a proxy that can announce a move, and a
// client of the proxy with maintenance notifications on.
type movingSetup struct {
	old   *redistest.Server
	proxy *faultproxy.Proxy
	c     *Client
	admin *redis.Client // of old, direct
	ev    *eventLog
}

func newMovingSetup(t *testing.T, old *redistest.Server, user, password string, relaxed time.Duration) *movingSetup {
	p, err := faultproxy.New(old.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// Redis 7.0 refuses the handshake; a server that sends notifications
	// accepts it.
	p.Stub("client", "maint_notifications")
	ev := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{p.Addr()}, Mode: ModeStandalone, Protocol: 3, OnEvent: ev.onEvent,
		Username: user, Password: password,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeAuto, RelaxedTimeout: relaxed}})
	return &movingSetup{old: old, proxy: p, c: c, admin: old.Admin(), ev: ev}
}

// blocked is how many clients of s wait in a blocking command.
func blocked(t *testing.T, s *redistest.Server) int {
	n, err := strconv.Atoi(s.Info(t, "clients")["blocked_clients"])
	require.NoError(t, err)
	return n
}

// A server announces that its endpoint moves to a second server (MOVING,
// injected by the proxy in front of it on every connection) while a BLPOP
// waits on it and a subscription listens to it. The BLPOP is ended on the
// old server without popping anything and waits on the new one, where a
// push answers it once; the subscription subscribes again on the new
// server and is told as a move. A BLPOP sent after the announcement goes
// to the new server.
func TestScenarioMovingMovesBlockingCallAndSubscription(t *testing.T) {
	sideBySide(t)
	s := newMovingSetup(t, redistest.StartServer(t), "", "", 5*time.Second)
	next := redistest.StartServer(t)
	nextAdmin := next.Admin()
	ctx := testCtx(t, 30*time.Second)

	sub := s.c.Subscribe(ctx, "moving:ch")
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	msgs := sub.Channel()
	// go-redis alone beside it, through the same proxy, on a channel of its
	// own.
	stock := redis.NewClient(&redis.Options{Addr: s.proxy.Addr(), Protocol: 3,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeAuto, RelaxedTimeout: 5 * time.Second}})
	t.Cleanup(func() { _ = stock.Close() })
	stockSub := stock.Subscribe(ctx, "moving:stock")
	t.Cleanup(func() { _ = stockSub.Close() })
	_, err = stockSub.Receive(ctx)
	require.NoError(t, err)
	stockMsgs := stockSub.Channel()

	type popped struct {
		v   []string
		err error
		at  time.Time
	}
	got := make(chan popped, 1)
	go func() {
		v, err := s.c.BLPop(ctx, 8*time.Second, "moving:list").Result()
		got <- popped{v, err, time.Now()}
	}()
	require.Eventually(t, func() bool { return blocked(t, s.old) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the BLPOP never waited on the old server")

	announced := time.Now()
	reached := s.proxy.Push(movingFrame(1, 15, next.Addr))
	t.Logf("MOVING reached %d connections", reached)

	require.Eventually(t, func() bool { return blocked(t, next) == 1 && blocked(t, s.old) == 0 }, 5*time.Second, 10*time.Millisecond,
		"the BLPOP did not move to the new server")
	t.Logf("the BLPOP waits on the new server %v after the announcement", time.Since(announced).Round(time.Millisecond))

	// Anything the old BLPOP could still take stays where it is.
	require.NoError(t, s.admin.RPush(ctx, "moving:list", "old").Err())
	require.NoError(t, nextAdmin.RPush(ctx, "moving:list", "v1", "v2").Err())
	select {
	case p := <-got:
		require.NoError(t, p.err, "the moved BLPOP failed")
		assert.Equal(t, []string{"moving:list", "v1"}, p.v)
	case <-time.After(5 * time.Second):
		t.Fatal("the moved BLPOP did not return")
	}
	assert.Equal(t, int64(1), nextAdmin.LLen(ctx, "moving:list").Val(), "the BLPOP popped more than once at the new server")
	assert.Equal(t, int64(1), s.admin.LLen(ctx, "moving:list").Val(), "something popped at the old server after the move")

	// The subscription is live again at the new server, and gone from the
	// old; go-redis alone's subscribes again at its health check, up to 3s
	// later.
	var moved, stockMoved time.Duration
	for end := time.Now().Add(5 * time.Second); (moved == 0 || stockMoved == 0) && time.Now().Before(end); {
		require.NoError(t, nextAdmin.Publish(ctx, "moving:ch", "hello").Err())
		require.NoError(t, nextAdmin.Publish(ctx, "moving:stock", "hello").Err())
		select {
		case m := <-msgs:
			if m.Payload == "hello" && moved == 0 {
				moved = time.Since(announced)
			}
		case m := <-stockMsgs:
			if m.Payload == "hello" && stockMoved == 0 {
				stockMoved = time.Since(announced)
			}
		case <-time.After(50 * time.Millisecond):
		}
	}
	show := func(d time.Duration) string {
		if d == 0 {
			return "not within 5s"
		}
		return fmtDur(d)
	}
	table(t, "MOVING to a second server: a subscription live at the new server after the announcement",
		[]string{"client", "live after"}, []string{"go-redis", show(stockMoved)}, []string{"redisguard", show(moved)})
	require.NotZero(t, moved, "the subscription was not live at the new server within 5s")
	assert.Less(t, moved, 2*time.Second, "the subscription took longer than go-redis's health check could")
	if stockMoved != 0 {
		assert.LessOrEqual(t, moved, stockMoved, "redisguard's subscription moved later than go-redis alone's")
	}
	assert.Zero(t, s.admin.PubSubNumSub(ctx, "moving:ch").Val()["moving:ch"], "the old server still has the subscription")
	evs := s.ev.find(EventSubscriptionMoved, func(e Event) bool { return e.To == next.Addr })
	assert.Len(t, evs, 1, "the subscription's move was not told once")

	// A BLPOP sent now waits on the new server.
	require.NoError(t, nextAdmin.RPush(ctx, "moving:later", "x").Err())
	v, err := s.c.BLPop(ctx, time.Second, "moving:later").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"moving:later", "x"}, v)
}

// A BLPOP moved halfway through its own timeout waits at the new server
// for what is left of it: it answers nil when the timeout it asked for
// runs out, not a whole timeout after the move.
func TestScenarioMovedBlockingCallKeepsItsTimeout(t *testing.T) {
	alone(t)
	s := newMovingSetup(t, redistest.StartServer(t), "", "", 5*time.Second)
	next := redistest.StartServer(t)
	ctx := testCtx(t, 30*time.Second)
	const timeout = 4 * time.Second

	start := time.Now()
	got := make(chan error, 1)
	go func() { got <- s.c.BLPop(ctx, timeout, "moving:timeout").Err() }()
	require.Eventually(t, func() bool { return blocked(t, s.old) == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(timeout/2 - time.Since(start))
	s.proxy.Push(movingFrame(1, 15, next.Addr))
	require.Eventually(t, func() bool { return blocked(t, next) == 1 }, 5*time.Second, 10*time.Millisecond)
	select {
	case err := <-got:
		took := time.Since(start)
		t.Logf("nil after %v of a %v timeout, moved halfway", took.Round(time.Millisecond), timeout)
		assert.ErrorIs(t, err, redis.Nil)
		assert.Less(t, took, timeout+timeout/4, "the moved BLPOP waited its whole timeout again")
		assert.GreaterOrEqual(t, took, timeout-100*time.Millisecond, "the moved BLPOP gave up early")
	case <-time.After(2 * timeout):
		t.Fatal("the moved BLPOP did not return")
	}
}

// A server announces a move to the same endpoint (MOVING with a null
// endpoint): connections re-dial it after half the announced time. A BLPOP
// waiting on it then is ended and sent again on a new connection, and is
// answered there once.
func TestScenarioMovingToTheSameEndpointRedialsBlockingCall(t *testing.T) {
	sideBySide(t)
	s := newMovingSetup(t, redistest.StartServer(t), "", "", 5*time.Second)
	ctx := testCtx(t, 30*time.Second)

	got := make(chan error, 1)
	var v []string
	go func() {
		var err error
		v, err = s.c.BLPop(ctx, 10*time.Second, "moving:same").Result()
		got <- err
	}()
	require.Eventually(t, func() bool { return blocked(t, s.old) == 1 }, 5*time.Second, 10*time.Millisecond)
	first := blockedID(t, ctx, s.admin)

	announced := time.Now()
	s.proxy.Push(movingFrame(7, 2, ""))
	require.Eventually(t, func() bool {
		id := blockedID(t, ctx, s.admin)
		return id != "" && id != first
	}, 5*time.Second, 10*time.Millisecond, "the BLPOP was not sent again on a new connection")
	after := time.Since(announced)
	t.Logf("re-dialled %v after the announcement", after.Round(time.Millisecond))
	assert.GreaterOrEqual(t, after, 900*time.Millisecond, "moved before half the announced time")

	require.NoError(t, s.admin.RPush(ctx, "moving:same", "a", "b").Err())
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Equal(t, []string{"moving:same", "a"}, v)
	case <-time.After(5 * time.Second):
		t.Fatal("the BLPOP did not return")
	}
	assert.Equal(t, int64(1), s.admin.LLen(ctx, "moving:same").Val(), "the BLPOP popped more than once")
}

// A user denied CLIENT UNBLOCK waits in a blocking call on a server that
// announces a move: nothing can prove the call unanswered, so it is cut off
// and ends as any call whose connection broke (docs/repeat.md). A pop is
// sent again, once, by the reset retry, and waits at the new server; a
// rotation of a list onto itself (BLMOVE l l) may have run, is not sent
// again, and ends with ErrOutcomeUnknown.
func TestScenarioMovingWithoutUnblockFollowsTheRepeatRules(t *testing.T) {
	sideBySide(t)
	for _, tc := range []struct {
		name   string
		call   func(ctx context.Context, c *Client) error
		resent bool
	}{
		{"pop", func(ctx context.Context, c *Client) error { return c.BLPop(ctx, 8*time.Second, "moving:cut").Err() }, true},
		{"rotation", func(ctx context.Context, c *Client) error {
			return c.BLMove(ctx, "moving:cut", "moving:cut", "LEFT", "RIGHT", 8*time.Second).Err()
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, next := redistest.StartServer(t), redistest.StartServer(t)
			user, password := limitedUser(t, old, next)
			s := newMovingSetup(t, old, user, password, 5*time.Second)
			ctx := testCtx(t, 30*time.Second)

			got := make(chan error, 1)
			go func() { got <- tc.call(ctx, s.c) }()
			require.Eventually(t, func() bool { return blocked(t, old) == 1 }, 5*time.Second, 10*time.Millisecond)
			s.proxy.Push(movingFrame(1, 15, next.Addr))
			if tc.resent {
				require.Eventually(t, func() bool { return blocked(t, next) == 1 }, 5*time.Second, 10*time.Millisecond,
					"the pop was not sent again at the new server")
				require.NoError(t, next.Admin().RPush(ctx, "moving:cut", "v").Err())
			}
			select {
			case err := <-got:
				if tc.resent {
					assert.NoError(t, err)
				} else {
					assert.ErrorIs(t, err, ErrOutcomeUnknown)
					assert.Zero(t, blocked(t, next), "the rotation was sent again")
				}
				t.Logf("the cut-off call: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the call did not return")
			}
			// The old server learns of a closed connection when it next
			// reads it.
			assert.Eventually(t, func() bool { return blocked(t, old) == 0 }, 2*time.Second, 10*time.Millisecond,
				"a call still waits on the old server")
		})
	}
}

// A blocking call's connection asks for notifications to hear MOVING, and
// only for that: a MIGRATING on it relaxes no timeout, which would replace
// the own timeout of the calls it carries next (go-redis reads a relaxed
// connection with RelaxedTimeout whatever the command waits for). A BLPOP
// that waits forever, on a connection told MIGRATING while idle, outlasts
// the relaxed timeout and is answered.
func TestScenarioMigratingLeavesBlockingCallsTheirOwnTimeout(t *testing.T) {
	sideBySide(t)
	const relaxed = 300 * time.Millisecond
	s := newMovingSetup(t, redistest.StartServer(t), "", "", relaxed)
	ctx := testCtx(t, 30*time.Second)
	// A dedicated connection, idle from now on.
	require.NoError(t, s.admin.RPush(ctx, "moving:forever", "first").Err())
	require.NoError(t, s.c.BLPop(ctx, 0, "moving:forever").Err())
	require.Equal(t, 1, s.proxy.Push([]byte(">3\r\n$9\r\nMIGRATING\r\n:1\r\n$4\r\n1234\r\n")))

	got := make(chan error, 1)
	var v []string
	go func() {
		var err error
		v, err = s.c.BLPop(ctx, 0, "moving:forever").Result()
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the BLPOP ended during the maintenance: %v", err)
	case <-time.After(4 * relaxed):
	}
	require.Equal(t, 1, blocked(t, s.old))
	require.NoError(t, s.admin.RPush(ctx, "moving:forever", "v").Err())
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Equal(t, []string{"moving:forever", "v"}, v)
	case <-time.After(5 * time.Second):
		t.Fatal("the BLPOP did not return")
	}
}

// blockedID is the client id of the one client blocked on a server, or "".
func blockedID(t *testing.T, ctx context.Context, admin *redis.Client) string {
	list, err := admin.ClientList(ctx).Result()
	require.NoError(t, err)
	for _, line := range splitLines(list) {
		f := clientFields(line)
		if f["cmd"] == "blpop" && f["flags"] == "b" {
			return f["id"]
		}
	}
	return ""
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// clientFields reads one CLIENT LIST line: "id=7 addr=... cmd=blpop ...".
func clientFields(line string) map[string]string {
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	return f
}
