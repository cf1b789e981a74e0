package redisguard

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadlineConn is a net.Conn that records the deadlines set on it and what
// it was asked to do; reads return its next chunk.
type deadlineConn struct {
	net.Conn // nil: a method not overridden here panics, so a test sees it used

	mu        sync.Mutex
	readDL    time.Time
	writeDL   time.Time
	closes    int
	chunks    [][]byte
	readError error
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL = t
	return nil
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDL = t
	return nil
}

func (c *deadlineConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.chunks) == 0 {
		return 0, c.readError
	}
	n := copy(p, c.chunks[0])
	c.chunks = c.chunks[1:]
	return n, nil
}

func (c *deadlineConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return nil
}

func (c *deadlineConn) deadlines() (read, write time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readDL, c.writeDL
}

func (c *deadlineConn) closed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closes
}

func TestSocketCapsReadDeadlines(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	limit := base.Add(time.Second)
	tests := []struct {
		name      string
		cap, set  time.Time
		wantReads time.Time
	}{
		{"no cap keeps the deadline", time.Time{}, base.Add(time.Hour), base.Add(time.Hour)},
		{"no cap keeps no deadline", time.Time{}, time.Time{}, time.Time{}},
		{"a later deadline is capped", limit, base.Add(time.Hour), limit},
		{"no deadline is capped", limit, time.Time{}, limit},
		{"an earlier deadline stays", limit, base.Add(time.Millisecond), base.Add(time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := &deadlineConn{}
			s := &socket{Conn: conn}
			s.capReads(tt.cap)

			require.NoError(t, s.SetReadDeadline(tt.set))
			read, _ := conn.deadlines()
			assert.True(t, read.Equal(tt.wantReads), "SetReadDeadline: got %v, want %v", read, tt.wantReads)

			require.NoError(t, s.SetDeadline(tt.set))
			read, write := conn.deadlines()
			assert.True(t, read.Equal(tt.wantReads), "SetDeadline read: got %v, want %v", read, tt.wantReads)
			assert.True(t, write.Equal(tt.set), "SetDeadline never caps writes: got %v, want %v", write, tt.set)
		})
	}
}

func TestSocketCapAppliesFromTheNextDeadline(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	conn := &deadlineConn{}
	s := &socket{Conn: conn}
	require.NoError(t, s.SetReadDeadline(base.Add(time.Hour)))

	s.capReads(base.Add(time.Second))
	read, _ := conn.deadlines()
	assert.True(t, read.Equal(base.Add(time.Hour)), "capReads changed a deadline already set")
	require.NoError(t, s.SetReadDeadline(base.Add(time.Hour)))
	read, _ = conn.deadlines()
	assert.True(t, read.Equal(base.Add(time.Second)))

	s.capReads(time.Time{}) // the cap is lifted for the next call
	require.NoError(t, s.SetReadDeadline(base.Add(time.Hour)))
	read, _ = conn.deadlines()
	assert.True(t, read.Equal(base.Add(time.Hour)))
}

func TestSocketAnsweredOnlyOnceBytesArrive(t *testing.T) {
	conn := &deadlineConn{readError: net.ErrClosed}
	s := &socket{Conn: conn}
	d := &dedicated{}
	assert.False(t, d.answered(), "no socket yet")
	d.setSocket(s)

	_, err := s.Read(make([]byte, 8))
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.False(t, d.answered(), "a read that returned nothing is no answer")

	conn.mu.Lock()
	conn.chunks = [][]byte{[]byte("+OK\r\n")}
	conn.mu.Unlock()
	n, err := s.Read(make([]byte, 8))
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.True(t, d.answered())
}

func TestDedicatedReadsByReachesItsSocket(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	d := &dedicated{}
	d.readsBy(base) // before the dial: nothing to cap, and no panic

	conn := &deadlineConn{}
	d.setSocket(&socket{Conn: conn})
	d.readsBy(base.Add(time.Second))
	require.NoError(t, d.sock.SetReadDeadline(time.Time{}))
	read, _ := conn.deadlines()
	assert.True(t, read.Equal(base.Add(time.Second)))
}

func TestSeverClosesTheSocketWhenEverItIsDialled(t *testing.T) {
	t.Run("after the dial", func(t *testing.T) {
		conn := &deadlineConn{}
		d := &dedicated{}
		d.setSocket(&socket{Conn: conn})
		d.sever()
		assert.Equal(t, 1, conn.closed())
		d.sever() // any number of times
		assert.GreaterOrEqual(t, conn.closed(), 1)
	})
	t.Run("before the dial", func(t *testing.T) {
		// A call cancelled while its connection is being dialled: the
		// socket arriving afterwards is closed at once.
		conn := &deadlineConn{}
		d := &dedicated{}
		d.sever()
		assert.Equal(t, 0, conn.closed())
		d.setSocket(&socket{Conn: conn})
		assert.Equal(t, 1, conn.closed())
	})
	t.Run("from many goroutines", func(t *testing.T) {
		conn := &deadlineConn{}
		d := &dedicated{}
		d.setSocket(&socket{Conn: conn})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(d.sever)
		}
		wg.Wait()
		assert.GreaterOrEqual(t, conn.closed(), 1)
	})
}

func TestSocketHookHandsTheDialledSocketOver(t *testing.T) {
	conn := &deadlineConn{}
	d := &dedicated{}
	sh := &shell{}
	sh.owner.Store(d)
	h := socketHook{sh: sh, timeout: time.Minute}
	dial := h.DialHook(func(context.Context, string, string) (net.Conn, error) { return conn, nil })

	got, err := dial(context.Background(), "tcp", "127.0.0.1:1")
	require.NoError(t, err)
	s, ok := got.(*socket)
	require.True(t, ok, "the dial returns the capped socket")
	assert.Same(t, net.Conn(conn), s.NetConn())
	assert.Same(t, s, d.sock)

	// The set-up's reads are capped at the hook's timeout from the dial.
	require.NoError(t, s.SetReadDeadline(time.Time{}))
	read, _ := conn.deadlines()
	assert.False(t, read.IsZero(), "the set-up may not wait forever")
	assert.WithinDuration(t, time.Now().Add(time.Minute), read, 30*time.Second)

	failing := h.DialHook(func(context.Context, string, string) (net.Conn, error) { return nil, net.ErrClosed })
	_, err = failing(context.Background(), "tcp", "127.0.0.1:1")
	assert.ErrorIs(t, err, net.ErrClosed)
}
