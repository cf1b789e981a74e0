package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// raw is a plain TCP connection through p, with a reader for its replies.
func raw(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c, bufio.NewReader(c)
}

// roundTrip sends req on c and returns the first line of the reply.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, req string) string {
	t.Helper()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

func TestPushReachesEveryClient(t *testing.T) {
	_, p := setup(t)
	a, ra := raw(t, p)
	b, rb := raw(t, p)
	// Both are relayed once they have been answered.
	roundTrip(t, a, ra, "*1\r\n$4\r\nPING\r\n")
	roundTrip(t, b, rb, "*1\r\n$4\r\nPING\r\n")
	const frame = ">3\r\n$9\r\nMIGRATING\r\n:1\r\n$1\r\n7\r\n"
	if n := p.Push([]byte(frame)); n != 2 {
		t.Fatalf("Push reached %d connections, want 2", n)
	}
	for _, r := range []*bufio.Reader{ra, rb} {
		got := make([]byte, len(frame))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != frame {
			t.Fatalf("the client read %q, want %q", got, frame)
		}
	}
	// The replies after the push are the server's, in order.
	if got := roundTrip(t, a, ra, "*1\r\n$4\r\nPING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("after the push: %q", got)
	}
}

func TestStubAnswersInTheServersPlace(t *testing.T) {
	_, p := setup(t)
	p.Stub("client", "maint_notifications")
	c, r := raw(t, p)
	if got := roundTrip(t, c, r, "*5\r\n$6\r\nclient\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$2\r\non\r\n$20\r\nmoving-endpoint-type\r\n$4\r\nnone\r\n"); got != "+PONG\r\n" {
		t.Fatalf("stubbed request answered %q", got)
	}
	if got := roundTrip(t, c, r, "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n"); got != "$5\r\n" {
		t.Fatalf("another request answered %q", got)
	}
	p.Unstub()
	c, r = raw(t, p)
	if got := roundTrip(t, c, r, "*3\r\n$6\r\nclient\r\n$19\r\nMAINT_NOTIFICATIONS\r\n$3\r\nxyz\r\n"); got == "+PONG\r\n" {
		t.Fatalf("a request answered by a removed stub")
	}
}

func TestStubRewritesOnlyWholeMatchingRequests(t *testing.T) {
	stubs := [][]string{{"client", "maint_notifications"}}
	const (
		maint = "*3\r\n$6\r\nclient\r\n$19\r\nmaint_notifications\r\n$3\r\noff\r\n"
		echo  = "*2\r\n$4\r\necho\r\n$1\r\nx\r\n"
		ping  = "*1\r\n$4\r\nPING\r\n"
	)
	for _, tt := range []struct{ name, in, want string }{
		{"alone", maint, ping},
		{"in a pipeline", echo + maint + echo, echo + ping + echo},
		{"another command", echo, echo},
		{"a prefix of it", "*2\r\n$6\r\nclient\r\n$2\r\nid\r\n", "*2\r\n$6\r\nclient\r\n$2\r\nid\r\n"},
		{"cut short", maint[:20], maint[:20]},
		{"inline", "PING\r\n", "PING\r\n"},
	} {
		if got := string(stub([]byte(tt.in), stubs)); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSetReplyDelay(t *testing.T) {
	_, p := setup(t)
	c, r := raw(t, p)
	const d = 150 * time.Millisecond
	p.SetReplyDelay(d)
	start := time.Now()
	if got := roundTrip(t, c, r, "*1\r\n$4\r\nPING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("delayed reply %q", got)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("the reply came after %v, before the delay of %v", took, d)
	}
	p.SetReplyDelay(0)
	start = time.Now()
	roundTrip(t, c, r, "*1\r\n$4\r\nPING\r\n")
	if took := time.Since(start); took >= d {
		t.Fatalf("the reply came after %v with no delay", took)
	}
}
