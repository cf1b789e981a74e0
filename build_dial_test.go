package redisguard

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// goRedisLines records go-redis's process-wide log lines for one test and
// restores go-redis's default logger after it.
type goRedisLines struct {
	mu    sync.Mutex
	lines []string
}

func recordGoRedisLines(t *testing.T) *goRedisLines {
	t.Helper()
	l := &goRedisLines{}
	redis.SetLogger(l)
	t.Cleanup(logging.Enable)
	return l
}

func (l *goRedisLines) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// about returns the lines that mention addr.
func (l *goRedisLines) about(addr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, addr) {
			out = append(out, line)
		}
	}
	return out
}

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// countingDialer dials as go-redis would and counts the dials.
type countingDialer struct{ dials atomic.Int32 }

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.dials.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// A probe or a sentinel question to an address that refuses connections
// fails with the dial's own error, and go-redis, whose process-wide logger
// belongs to the user, logs nothing about it: probes of a node that is down
// fail their dials by design, once a second or more.
func TestProbeDialFailsWithoutAGoRedisLine(t *testing.T) {
	lines := recordGoRedisLines(t)
	addr := closedPort(t)
	ctx := testCtx(t, 5*time.Second)

	_, err := probeAddr(ctx, &redis.Options{}, addr, time.Second, "ping")
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	sc := newGoRedis(clientSpec{kind: clientSentinelQuestion, base: &redis.Options{}, addr: addr, wait: time.Second}).(*redis.SentinelClient)
	defer sc.Close()
	err = sc.GetMasterAddrByName(ctx, "mymaster").Err()
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	// The go-redis client alone, for contrast: it says so on stderr.
	plain := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer plain.Close()
	require.Error(t, plain.Ping(ctx).Err())
	require.NotEmpty(t, lines.about(addr), "go-redis no longer logs failed dials: the test proves nothing")
	for _, line := range lines.about(addr) {
		assert.Contains(t, line, "failed to dial", "a line of the plain client's only")
	}
	assert.Len(t, lines.about(addr), 1, "a probe's failed dial was logged by go-redis: %q", lines.about(addr))
}

// A probe's commands share the connection the hook dialled; a command that
// fails other than by a reply lets the next one dial again, quietly.
func TestProbeDialsOnceForItsCommands(t *testing.T) {
	srv := miniredis.RunT(t)
	d := &countingDialer{}
	ctx := testCtx(t, 5*time.Second)
	probeConn(ctx, &redis.Options{Dialer: d.dial}, srv.Addr(), time.Second, func(cl *redis.Client) {
		require.NoError(t, cl.Ping(ctx).Err())
		require.NoError(t, cl.Set(ctx, "k", "v", 0).Err())
		assert.Error(t, cl.Do(ctx, "nosuchcommand").Err(), "a reply")
		require.Equal(t, "v", cl.Get(ctx, "k").Val())
	})
	assert.Equal(t, int32(1), d.dials.Load(), "one connection for every command")

	lines := recordGoRedisLines(t)
	addr := closedPort(t)
	probeConn(ctx, &redis.Options{Dialer: d.dial}, addr, time.Second, func(cl *redis.Client) {
		assert.Error(t, cl.Ping(ctx).Err())
		assert.Error(t, cl.Ping(ctx).Err())
	})
	assert.Equal(t, int32(3), d.dials.Load(), "each command after a failed dial dials again")
	assert.Empty(t, lines.about(addr))
}

// probeFailures returns the recovery probe failures logs recorded for addr.
func probeFailures(logs *eventLog, addr string) int {
	_, lines := logs.all()
	n := 0
	for _, l := range lines {
		if l.msg == "redisguard: recovery probe failed" && l.attrs["node"] == addr {
			if l.level != slog.LevelDebug {
				panic("a probe failure logged at " + l.level.String())
			}
			n++
		}
	}
	return n
}

// What a user sees when the one seed of a ModeAuto Client is down at
// start: NewClient succeeds, Config.Logger says at warn level that the
// Client runs Standalone until the server answers, commands fail with the
// dial's error naming the node, the node's breaker opens, and the recovery
// probes that follow fail in Config.Logger at debug level. go-redis writes
// nothing about the address to its own logger (stderr unless LogGoRedisTo).
func TestSeedDownAtStartWritesNoGoRedisLine(t *testing.T) {
	lines := recordGoRedisLines(t)
	addr := closedPort(t)
	logs := &eventLog{}
	c := newTestClient(t, Config{Addrs: []string{addr}, Logger: logs.logger()})
	require.Equal(t, ModeStandalone, c.Mode())
	ctx := testCtx(t, 10*time.Second)
	for range DefaultNodeFailureThreshold + 1 {
		err := c.Set(ctx, "k", 1, 0).Err()
		require.Error(t, err)
		assert.Contains(t, err.Error(), addr)
	}
	redistest.WaitFor(t, 5*time.Second, "two failed recovery probes", func() error {
		if n := probeFailures(logs, addr); n < 2 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	_, records := logs.all()
	var warned []string
	for _, l := range records {
		if l.level == slog.LevelWarn {
			warned = append(warned, l.msg)
		}
	}
	assert.Contains(t, warned, "redisguard: the server did not say whether it is a cluster node; running Standalone until it answers")
	assert.Contains(t, warned, "redisguard: node breaker opened")
	assert.Empty(t, lines.about(addr), "go-redis logged about the seed")
}

// A Cluster master killed: the Client's commands to it and its recovery
// probes, every one of which fails its dial, leave no line in go-redis's
// logger; the probes' failures are in Config.Logger at debug level. Before
// the probes dialled for themselves (quietDial), each wrote
// "redis: connection pool: failed to dial after 1 attempts" to stderr.
func TestKilledMasterWritesNoGoRedisLine(t *testing.T) {
	lines := recordGoRedisLines(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Args: []string{"--cluster-require-full-coverage", "no"}})
	dead := cl.Masters[1]
	key := cl.KeyOn(t, dead, "k:")
	logs := &eventLog{}
	c := newTestClient(t, Config{Addrs: cl.Addrs(), Logger: logs.logger()})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, key, 1, 0).Err())
	dead.Kill(t)
	redistest.WaitFor(t, 10*time.Second, "three failed recovery probes", func() error {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = c.Set(short, key, 1, 0).Err()
		if n := probeFailures(logs, dead.Addr); n < 3 {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	assert.Empty(t, lines.about(dead.Addr), "go-redis logged about the killed master")
}
