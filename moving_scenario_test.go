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

func newMovingSetup(t *testing.T) *movingSetup {
	old := redistest.StartServer(t)
	p, err := faultproxy.New(old.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// Redis 7.0 refuses the handshake; a server that sends notifications
	// accepts it.
	p.Stub("client", "maint_notifications")
	ev := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{p.Addr()}, Mode: ModeStandalone, Protocol: 3, OnEvent: ev.onEvent,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeAuto, RelaxedTimeout: 5 * time.Second}})
	return &movingSetup{old: old, proxy: p, c: c, admin: old.Admin(), ev: ev}
}

// blocked is how many clients of s wait in a blocking command.
func blocked(t *testing.T, s *redistest.Server) int {
	n, err := strconv.Atoi(s.Info(t, "clients")["blocked_clients"])
	require.NoError(t, err)
	return n
}

// A server announces a move to the same endpoint (MOVING with a null
// endpoint): connections re-dial it after half the announced time. A BLPOP
// waiting on it then is ended and sent again on a new connection, and is
// answered there once.
func TestScenarioMovingToTheSameEndpointRedialsBlockingCall(t *testing.T) {
	sideBySide(t)
	s := newMovingSetup(t)
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
