package redisguard

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A dedicated connection's socket, which admission holds so that it can cap
// every read's deadline and close the socket under a read in progress.

// socketHook hands the dedicated connection its shell carries the socket
// the shell dials, wrapped (see socket).
type socketHook struct {
	sh      *shell
	timeout time.Duration // how long the set-up may wait for an answer: ReadTimeout
}

func (h socketHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to := h.sh.owner.Load().dialled; to != "" {
			addr = to // its node has moved (dedicated_moving.go)
		}
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s := &socket{Conn: conn}
		s.capReads(time.Now().Add(h.timeout))
		h.sh.owner.Load().setSocket(s)
		return s, nil
	}
}

func (socketHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (socketHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *dedicated) setSocket(s *socket) {
	d.mu.Lock()
	d.sock = s
	severed := d.severed
	d.mu.Unlock()
	if severed {
		_ = s.Close()
	}
}

// readsBy caps the read deadlines of d's socket at t (none if zero).
func (d *dedicated) readsBy(t time.Time) {
	d.mu.Lock()
	s := d.sock
	d.mu.Unlock()
	if s != nil {
		s.capReads(t)
	}
}

// answered reports whether the server has sent anything on d.
func (d *dedicated) answered() bool {
	d.mu.Lock()
	s := d.sock
	d.mu.Unlock()
	return s != nil && s.answered.Load()
}

// sever closes d's socket: a read or write in progress on it fails at once,
// and the server, seeing the connection gone, drops the command it holds
// (a BLPOP takes nothing more). It may be called from any goroutine, any
// number of times.
func (d *dedicated) sever() {
	d.mu.Lock()
	d.severed = true
	s := d.sock
	d.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
}

// socket is a dedicated connection's network connection. go-redis sets its
// read deadline before every read from the context alone (dedicated clients
// have no ReadTimeout), and clears it whenever it peeks for pushed data;
// socket caps whatever it sets at the deadline admission chose for the call
// in progress, so that the cap holds for each of the call's reads.
type socket struct {
	net.Conn
	capNs    atomic.Int64 // unix ns of the latest read deadline allowed; 0: none
	answered atomic.Bool  // the server has sent something
}

// capReads caps read deadlines at t (none if zero), from the next one set.
func (s *socket) capReads(t time.Time) {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	s.capNs.Store(ns)
}

func (s *socket) capped(t time.Time) time.Time {
	ns := s.capNs.Load()
	if ns == 0 {
		return t
	}
	if limit := time.Unix(0, ns); t.IsZero() || limit.Before(t) {
		return limit
	}
	return t
}

func (s *socket) SetReadDeadline(t time.Time) error { return s.Conn.SetReadDeadline(s.capped(t)) }

func (s *socket) SetDeadline(t time.Time) error {
	if err := s.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return s.Conn.SetReadDeadline(s.capped(t))
}

func (s *socket) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if n > 0 {
		s.answered.Store(true)
	}
	return n, err
}

// NetConn lets go-redis reach the connection underneath, as it does through
// TLS, to peek for pushed data.
func (s *socket) NetConn() net.Conn { return s.Conn }
