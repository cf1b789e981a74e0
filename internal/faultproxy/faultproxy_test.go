package faultproxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/goleak"
)

// Close must stop every goroutine the proxy started, whatever state its
// connections were in.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// readTimeout is short so blackhole tests are quick, and long enough for a
// loaded machine running under -race.
const readTimeout = 500 * time.Millisecond

// setup starts a miniredis and a proxy in front of it.
func setup(t *testing.T) (*miniredis.Miniredis, *Proxy) {
	t.Helper()
	srv := miniredis.RunT(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv, p
}

// client is a plain go-redis client through the proxy: short timeouts, no
// retries, so every fault shows up as one error.
func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		DialTimeout:              readTimeout,
		ReadTimeout:              readTimeout,
		WriteTimeout:             readTimeout,
		MaxRetries:               -1,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawConn dials the proxy directly, for checks below the client library.
func rawConn(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// ping sends PING on a raw connection and returns the reply line.
func ping(c net.Conn, r *bufio.Reader) (string, error) {
	if err := c.SetDeadline(time.Now().Add(readTimeout)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return strings.TrimSpace(line), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

func TestPass(t *testing.T) {
	srv, p := setup(t)
	c := client(t, p.Addr())
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := srv.Get("k"); got != "v" {
		t.Fatalf("server has k=%q, want v", got)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET through the proxy = %q, %v", got, err)
	}
	if s := p.Stats(); s.Accepted != 1 || s.Open != 1 || s.Swallowed != 0 || s.Reset != 0 {
		t.Fatalf("stats %+v, want one open connection and nothing lost", s)
	}
	if p.Mode() != Pass || p.Target() != srv.Addr() {
		t.Fatalf("mode %v, target %s", p.Mode(), p.Target())
	}
}

// A blackholed server answers nothing and tells nobody: clients time out,
// on connections they had and on new ones, and the server never sees the
// command.
func TestBlackholeTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		warm     bool // connection opened before the blackhole
		wantConn int  // connections accepted in all
	}{
		{name: "open connection", warm: true, wantConn: 1},
		{name: "new connection", warm: false, wantConn: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p := setup(t)
			c := client(t, p.Addr())
			ctx := context.Background()
			if tc.warm {
				if err := c.Ping(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			before := srv.CommandCount()
			if err := p.SetMode(Blackhole); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := c.Set(ctx, "k", "v", 0).Err()
			elapsed := time.Since(start)
			if !isTimeout(err) {
				t.Fatalf("SET through a blackhole: %v, want a timeout", err)
			}
			if elapsed < readTimeout/2 {
				t.Fatalf("failed after %v: a hung server makes the client wait for its timeout", elapsed)
			}
			if got := srv.CommandCount(); got != before {
				t.Fatalf("server ran %d commands during the blackhole", got-before)
			}
			s := p.Stats()
			if s.Swallowed == 0 || s.Reset != 0 || s.Accepted != tc.wantConn {
				t.Fatalf("stats %+v: want swallowed bytes, no reset, %d accepted", s, tc.wantConn)
			}
		})
	}
}

// Leaving the blackhole, connections that lost bytes are reset (their
// replies can never line up again), idle ones keep working, and clients work
// again.
func TestBlackholeRecovers(t *testing.T) {
	_, p := setup(t)
	idle, idleR := rawConn(t, p)
	if got, err := ping(idle, idleR); err != nil || got != "+PONG" {
		t.Fatalf("PING before: %q, %v", got, err)
	}
	lost, lostR := rawConn(t, p)
	if err := p.SetMode(Blackhole); err != nil {
		t.Fatal(err)
	}
	if got, err := ping(lost, lostR); !isTimeout(err) {
		t.Fatalf("PING in the blackhole: %q, %v; want a timeout", got, err)
	}
	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	// The lost connection is reset: a read does not wait for a reply that
	// was thrown away.
	_ = lost.SetDeadline(time.Now().Add(time.Second))
	if _, err := lostR.ReadByte(); !isReset(err) {
		t.Fatalf("read on a connection that lost bytes: %v, want a reset", err)
	}
	if got, err := ping(idle, idleR); err != nil || got != "+PONG" {
		t.Fatalf("PING on the idle connection after recovery: %q, %v", got, err)
	}
	if err := client(t, p.Addr()).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING on a new connection after recovery: %v", err)
	}
	if s := p.Stats(); s.Reset != 1 {
		t.Fatalf("stats %+v: want exactly the lost connection reset", s)
	}
}

// Reset mode rejects the service loudly: open and new connections are reset,
// and clients learn it at once instead of timing out.
func TestReset(t *testing.T) {
	_, p := setup(t)
	open, openR := rawConn(t, p)
	if got, err := ping(open, openR); err != nil || got != "+PONG" {
		t.Fatalf("PING before: %q, %v", got, err)
	}
	if err := p.SetMode(Reset); err != nil {
		t.Fatal(err)
	}
	_ = open.SetDeadline(time.Now().Add(time.Second))
	if _, err := openR.ReadByte(); !isReset(err) {
		t.Fatalf("read on an open connection: %v, want a reset", err)
	}

	c := client(t, p.Addr())
	start := time.Now()
	err := c.Ping(context.Background()).Err()
	if err == nil || isTimeout(err) || !isReset(err) {
		t.Fatalf("PING on a new connection: %v, want a reset", err)
	}
	if elapsed := time.Since(start); elapsed >= readTimeout {
		t.Fatalf("reset took %v: it must not look like a timeout", elapsed)
	}

	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after recovery: %v", err)
	}
	if s := p.Stats(); s.Reset < 2 {
		t.Fatalf("stats %+v: want both connections counted as reset", s)
	}
}

// Hangup is a proxy with no backend: connections are accepted and closed
// at once with a FIN, open ones included, so clients read EOF, promptly,
// however often they reconnect.
func TestHangup(t *testing.T) {
	_, p := setup(t)
	open, openR := rawConn(t, p)
	if got, err := ping(open, openR); err != nil || got != "+PONG" {
		t.Fatalf("PING before: %q, %v", got, err)
	}
	if err := p.SetMode(Hangup); err != nil {
		t.Fatal(err)
	}
	_ = open.SetDeadline(time.Now().Add(time.Second))
	if _, err := openR.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("read on an open connection: %v, want EOF", err)
	}

	before := p.Stats().Accepted
	start := time.Now()
	for i := range 3 {
		fresh, freshR := rawConn(t, p)
		if _, err := ping(fresh, freshR); !errors.Is(err, io.EOF) {
			t.Fatalf("PING on new connection %d: %v, want EOF", i, err)
		}
	}
	if elapsed := time.Since(start); elapsed >= readTimeout {
		t.Fatalf("three hang-ups took %v: they must not look like timeouts", elapsed)
	}
	if s := p.Stats(); s.Accepted-before != 3 || s.Open != 0 {
		t.Fatalf("stats %+v: want three more connections accepted and none open", s)
	}

	if err := p.SetMode(Pass); err != nil {
		t.Fatal(err)
	}
	if err := client(t, p.Addr()).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after recovery: %v", err)
	}
}

// ResetConns is a one-off, like CLIENT KILL: the mode stays Pass and the
// next connection works.
func TestResetConns(t *testing.T) {
	_, p := setup(t)
	raw, rawR := rawConn(t, p)
	if _, err := ping(raw, rawR); err != nil {
		t.Fatal(err)
	}
	c := client(t, p.Addr())
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetConns(); n != 2 {
		t.Fatalf("ResetConns = %d, want 2", n)
	}
	_ = raw.SetDeadline(time.Now().Add(time.Second))
	if _, err := rawR.ReadByte(); !isReset(err) {
		t.Fatalf("read on a reset connection: %v, want a reset", err)
	}
	// go-redis notices the dead pooled connection before using it and
	// dials a new one.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after ResetConns: %v", err)
	}
	if s := p.Stats(); s.Accepted != 3 || s.Reset != 2 || p.Mode() != Pass {
		t.Fatalf("stats %+v, mode %v; want a third connection in Pass mode", s, p.Mode())
	}
}

// LoseOneReply: the server runs the command, the client's connection is
// reset instead of answered, and the proxy is back in Pass for the next one.
func TestLoseOneReply(t *testing.T) {
	srv, p := setup(t)
	raw, rawR := rawConn(t, p)
	if _, err := ping(raw, rawR); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(LoseOneReply); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(raw, "*3\r\n$5\r\nRPUSH\r\n$1\r\nq\r\n$1\r\nx\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := rawR.ReadByte(); !isReset(err) {
		t.Fatalf("read after RPUSH: %v, want a reset", err)
	}
	if items, err := srv.List("q"); err != nil || len(items) != 1 {
		t.Fatalf("server list q = %v, %v: want the one item the lost reply was for", items, err)
	}
	if p.Mode() != Pass {
		t.Fatalf("mode %v after the lost reply, want pass", p.Mode())
	}
	c := client(t, p.Addr())
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after the lost reply: %v", err)
	}
	if s := p.Stats(); s.Reset != 1 {
		t.Fatalf("stats %+v: want one reset", s)
	}
}

// LoseReplyTo loses the reply to the request it names and to nothing
// else: other connections, and the same connection before that request,
// are answered.
func TestLoseReplyTo(t *testing.T) {
	srv, p := setup(t)
	other, otherR := rawConn(t, p)
	target, targetR := rawConn(t, p)
	for _, c := range []struct {
		conn net.Conn
		r    *bufio.Reader
	}{{other, otherR}, {target, targetR}} {
		if _, err := ping(c.conn, c.r); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.LoseReplyTo(""); err == nil {
		t.Fatal("LoseReplyTo with nothing to look for accepted")
	}
	if err := p.LoseReplyTo("target-queue"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		conn net.Conn
		r    *bufio.Reader
	}{"other connection": {other, otherR}, "target connection, earlier request": {target, targetR}} {
		if got, err := ping(c.conn, c.r); err != nil || got != "+PONG" {
			t.Fatalf("PING on the %s: %q, %v; want it answered", name, got, err)
		}
	}
	_ = target.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(target, "*3\r\n$5\r\nRPUSH\r\n$12\r\ntarget-queue\r\n$1\r\nx\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := targetR.ReadByte(); !isReset(err) {
		t.Fatalf("read after RPUSH target-queue: %v, want a reset", err)
	}
	if items, err := srv.List("target-queue"); err != nil || len(items) != 1 {
		t.Fatalf("server list = %v, %v: want the one item the lost reply was for", items, err)
	}
	if got, err := ping(other, otherR); err != nil || got != "+PONG" || p.Mode() != Pass {
		t.Fatalf("after the lost reply: PING %q, %v, mode %v; want answered in pass", got, err, p.Mode())
	}
}

// DropReplies is a node that hangs after the send: the server runs what it
// is sent, on open and new connections alike, and the client hears nothing
// and times out. Back in Pass, the connections that lost replies are reset,
// idle ones keep working, and clients work again.
func TestDropReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		warm bool // connection opened before the fault
	}{
		{name: "open connection", warm: true},
		{name: "new connection", warm: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, p := setup(t)
			idle, idleR := rawConn(t, p)
			if got, err := ping(idle, idleR); err != nil || got != "+PONG" {
				t.Fatalf("PING before: %q, %v", got, err)
			}
			var lost net.Conn
			var lostR *bufio.Reader
			if tc.warm {
				lost, lostR = rawConn(t, p)
				if _, err := ping(lost, lostR); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.SetMode(DropReplies); err != nil {
				t.Fatal(err)
			}
			if !tc.warm {
				lost, lostR = rawConn(t, p)
			}
			_ = lost.SetDeadline(time.Now().Add(readTimeout))
			if _, err := io.WriteString(lost, "*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := lostR.ReadByte(); !isTimeout(err) {
				t.Fatalf("read after INCR with replies dropped: %v, want a timeout", err)
			}
			if elapsed := time.Since(start); elapsed < readTimeout/2 {
				t.Fatalf("failed after %v: a node that hangs makes the client wait for its timeout", elapsed)
			}
			if got, err := srv.Get("n"); err != nil || got != "1" {
				t.Fatalf("server has n=%q (%v), want 1: the request must reach the server", got, err)
			}
			if s := p.Stats(); s.Swallowed == 0 || s.Reset != 0 {
				t.Fatalf("stats %+v: want swallowed reply bytes and no reset yet", s)
			}

			if err := p.SetMode(Pass); err != nil {
				t.Fatal(err)
			}
			_ = lost.SetDeadline(time.Now().Add(time.Second))
			if _, err := lostR.ReadByte(); !isReset(err) {
				t.Fatalf("read on a connection that lost a reply: %v, want a reset", err)
			}
			if got, err := ping(idle, idleR); err != nil || got != "+PONG" {
				t.Fatalf("PING on the idle connection after recovery: %q, %v", got, err)
			}
			if n, err := client(t, p.Addr()).Incr(context.Background(), "n").Result(); err != nil || n != 2 {
				t.Fatalf("INCR on a new connection after recovery: %d, %v; want 2", n, err)
			}
			if s := p.Stats(); s.Reset != 1 {
				t.Fatalf("stats %+v: want exactly the connection that lost a reply reset", s)
			}
		})
	}
}

func TestSetModeRejectsUnknown(t *testing.T) {
	_, p := setup(t)
	for _, m := range []Mode{-1, modeEnd} {
		if err := p.SetMode(m); err == nil {
			t.Errorf("SetMode(%d) accepted", int(m))
		}
	}
	if p.Mode() != Pass {
		t.Fatalf("mode changed to %v by a rejected SetMode", p.Mode())
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{Pass: "pass", Blackhole: "blackhole", Reset: "reset", LoseOneReply: "lose-one-reply", Hangup: "hangup", DropReplies: "drop-replies", 7: "Mode(7)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

// Close ends relays in every state (goleak in TestMain checks the
// goroutines) and is idempotent; the target never goes away with it.
func TestClose(t *testing.T) {
	srv := miniredis.RunT(t)
	p, err := New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	passing, passingR := rawConn(t, p)
	if _, err := ping(passing, passingR); err != nil {
		t.Fatal(err)
	}
	if err := p.SetMode(Blackhole); err != nil {
		t.Fatal(err)
	}
	hung, hungR := rawConn(t, p)
	if _, err := ping(hung, hungR); !isTimeout(err) {
		t.Fatalf("PING in the blackhole: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for i, r := range []*bufio.Reader{passingR, hungR} {
		_ = []net.Conn{passing, hung}[i].SetDeadline(time.Now().Add(time.Second))
		if _, err := r.ReadByte(); err == nil || isTimeout(err) {
			t.Fatalf("read after Close: %v, want the connection closed", err)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
	if s := p.Stats(); s.Open != 0 {
		t.Fatalf("stats %+v after Close", s)
	}
}

// A proxy whose target has gone resets its clients instead of leaving them
// to time out.
func TestTargetGone(t *testing.T) {
	srv, p := setup(t)
	srv.Close()
	// The reset may arrive before the dial returns or on the first read.
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if !isReset(err) {
		t.Fatalf("connecting through a proxy to nothing: %v, want a reset", err)
	}
}
