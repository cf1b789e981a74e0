package faultproxy

import (
	"strings"
	"time"

	"github.com/redisguard/redisguard/internal/resp"
)

// Push writes frame, a RESP3 push notification such as go-redis's
// maintenance notifications (">3\r\n+MIGRATING\r\n:1\r\n:15\r\n"), to the
// client of every open connection, as a server announcing something would,
// and returns how many it reached. It lands between two of the server's
// reads relayed to the client, which is between two replies unless a reply
// spans reads (one larger than the proxy's buffer, or a pipeline's).
func (p *Proxy) Push(frame []byte) int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	n := 0
	for _, l := range links {
		if l.write(l.client, frame) == nil {
			n++
		}
	}
	return n
}

// SetReplyDelay holds every read from the server for d before relaying it,
// on every connection from now on: a server whose replies come late, as
// during a migration. Zero relays at once again.
func (p *Proxy) SetReplyDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stub makes the proxy answer, through the server, the requests whose
// first arguments are args (case-insensitive): each is sent to the server
// as PING, so the client hears +PONG, a status reply, for a command the
// server would refuse (CLIENT MAINT_NOTIFICATIONS on a server without
// maintenance notifications, say). A request is recognised when one read
// from the client holds it whole.
func (p *Proxy) Stub(args ...string) {
	p.mu.Lock()
	p.stubs = append(p.stubs, args)
	p.mu.Unlock()
}

// Unstub relays every request to the server as it is again.
func (p *Proxy) Unstub() {
	p.mu.Lock()
	p.stubs = nil
	p.mu.Unlock()
}

// ping is PING as a client sends it.
var pingRequest = resp.AppendCommand(nil, "PING")

// stub returns b with each whole request in it that a stub matches
// replaced by PING; b itself when none does or b is not whole requests.
func stub(b []byte, stubs [][]string) []byte {
	var out []byte
	for rest := b; len(rest) > 0; {
		args, n, ok := parseRequest(rest)
		if !ok {
			return b
		}
		if matchesAny(args, stubs) {
			if out == nil {
				out = append(make([]byte, 0, len(b)), b[:len(b)-len(rest)]...)
			}
			out = append(out, pingRequest...)
		} else if out != nil {
			out = append(out, rest[:n]...)
		}
		rest = rest[n:]
	}
	if out == nil {
		return b
	}
	return out
}

func matchesAny(args []string, stubs [][]string) bool {
	for _, s := range stubs {
		if len(args) < len(s) {
			continue
		}
		match := true
		for i, a := range s {
			if !strings.EqualFold(args[i], a) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// parseRequest reads one request, an array of bulk strings, from the start
// of b: its arguments and its length in bytes; ok is false for the start of
// one, or anything else.
func parseRequest(b []byte) (args []string, n int, ok bool) {
	raw, n, err := resp.Command(b, nil)
	if err != nil || n == 0 {
		return nil, 0, false
	}
	args = make([]string, len(raw))
	for i, a := range raw {
		args[i] = string(a)
	}
	return args, n, true
}
