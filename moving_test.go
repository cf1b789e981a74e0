package redisguard

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
)

// A MOVING notification is read as go-redis's push processor hands it
// over: a null endpoint, in any of its spellings, means the same one.
func TestParseMoving(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    []interface{}
		want movingNotice
		ok   bool
	}{
		{"endpoint", []interface{}{"MOVING", int64(3), int64(15), "10.0.0.2:6379"}, movingNotice{seq: 3, within: 15 * time.Second, to: "10.0.0.2:6379"}, true},
		{"null", []interface{}{"MOVING", int64(4), int64(10), nil}, movingNotice{seq: 4, within: 10 * time.Second}, true},
		{"null spelled out", []interface{}{"MOVING", int64(4), int64(10), "null"}, movingNotice{seq: 4, within: 10 * time.Second}, true},
		{"no endpoint", []interface{}{"MOVING", int64(5), int64(2)}, movingNotice{seq: 5, within: 2 * time.Second}, true},
		{"another notification", []interface{}{"MIGRATING", int64(1), int64(15), "x:1"}, movingNotice{}, false},
		{"seq not a number", []interface{}{"MOVING", "1", int64(15), "x:1"}, movingNotice{}, false},
		{"negative time", []interface{}{"MOVING", int64(1), int64(-1), "x:1"}, movingNotice{}, false},
		{"endpoint not a string", []interface{}{"MOVING", int64(1), int64(15), int64(7)}, movingNotice{}, false},
		{"too short", []interface{}{"MOVING", int64(1)}, movingNotice{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseMoving(tc.n)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A move to a named endpoint takes effect at once; one to the same endpoint
// after half its time. A connection opened before it takes effect is left
// behind, unless it is at the new endpoint already.
func TestNodeMove(t *testing.T) {
	now := time.Unix(1000, 0)
	before, after := now.Add(-time.Second), now.Add(time.Second)

	to := movingNotice{seq: 1, within: 10 * time.Second, to: "new:1"}.plan(now)
	assert.Equal(t, now, to.from)
	assert.Equal(t, "new:1", to.endpoint(now))
	assert.True(t, to.stale("", before, now), "a connection to the old endpoint stays")
	assert.False(t, to.stale("new:1", before, now), "one at the new endpoint already is left behind")
	assert.False(t, to.stale("", now, now), "one opened as the move took effect is left behind")

	same := movingNotice{seq: 2, within: 10 * time.Second}.plan(now)
	half := now.Add(5 * time.Second)
	assert.Equal(t, half, same.from)
	assert.Equal(t, "", same.endpoint(half))
	assert.False(t, same.stale("", before, now), "moved before half the announced time")
	assert.True(t, same.stale("", before, half), "not moved at half the announced time")
	assert.True(t, same.stale("", after, half), "opened after the announcement, not moved at half its time")
	assert.False(t, same.stale("", half, half.Add(time.Second)), "re-dialled, moved again")

	assert.True(t, to.replaces(nodeMove{}, false))
	assert.False(t, to.replaces(to, true), "every connection's copy of one announcement moves the calls again")
	assert.True(t, same.replaces(to, true))
}

// A move's decision on a call's result: a reply that beat the UNBLOCK is
// delivered, -UNBLOCKED proves the call unanswered and sends it again, and
// anything else is the call's own result.
func TestMovedCall(t *testing.T) {
	unblocked := redisErr("UNBLOCKED client unblocked via CLIENT UNBLOCK")
	cut := errors.New("read tcp: use of closed network connection")
	for _, tc := range []struct {
		name  string
		err   error
		moves int
		again bool
		want  error // nil: err itself, unless again
	}{
		{"reply", nil, 0, false, nil},
		{"timed out", redis.Nil, 0, false, redis.Nil},
		{"unblocked", unblocked, 0, true, nil},
		{"error reply", redisErr("WRONGTYPE"), 0, false, redisErr("WRONGTYPE")},
		{"cut off", cut, 0, false, cut},
		{"moved again", unblocked, maxMoves - 1, true, nil},
		{"moved too often", unblocked, maxMoves, false, ErrNodeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := redis.NewStringSliceCmd(context.Background(), "blpop", "q", 1)
			cmd.SetErr(tc.err)
			again, err := movedCall(cmd, tc.err, tc.moves)
			assert.Equal(t, tc.again, again)
			switch {
			case tc.again:
				assert.NoError(t, err)
				assert.NoError(t, cmd.Err(), "sent again with the old reply's error")
			case errors.Is(tc.want, ErrNodeUnavailable):
				assert.ErrorIs(t, err, ErrNodeUnavailable)
			default:
				assert.Equal(t, tc.want, err)
			}
		})
	}
}

// Once a node announces a move, new dedicated connections to it dial the
// new endpoint, those opened before are stale, and every call on one of
// them is due to move; a node that did not move is left alone.
func TestAdmissionFollowsMove(t *testing.T) {
	cfg, err := Config{Addrs: []string{"a:1", "b:1"}}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(1000, 0))
	a := newAdmission(newCore(cfg, clk), nil, nil, nil)
	t.Cleanup(func() { _ = a.close() })
	old := &dedicated{key: "a:1", opened: clk.Now()}
	other := &dedicated{key: "b:1", opened: clk.Now()}
	a.live[old], a.live[other] = struct{}{}, struct{}{}
	clk.Advance(time.Second)

	a.moving("a:1", movingNotice{seq: 1, within: 10 * time.Second, to: "c:1"})
	a.mu.Lock()
	assert.Equal(t, "c:1", a.endpointLocked("a:1"))
	assert.Equal(t, "", a.endpointLocked("b:1"))
	assert.True(t, a.staleLocked(old))
	assert.False(t, a.staleLocked(other))
	a.mu.Unlock()
	old.mu.Lock()
	assert.False(t, old.moveAt.IsZero(), "the call on the old endpoint is not due to move")
	old.mu.Unlock()
	other.mu.Lock()
	assert.True(t, other.moveAt.IsZero(), "a call on another node is due to move")
	other.mu.Unlock()

	// The call in progress moves when it is armed: the move is due now.
	var cause error
	ctx, move := context.WithCancelCause(context.Background())
	old.following(move)
	<-ctx.Done()
	cause = context.Cause(ctx)
	old.following(nil)
	assert.ErrorIs(t, cause, errMoved)
}

// A move to the same endpoint moves nothing until half the announced time
// has passed; a connection opened meanwhile is due to move then too.
func TestAdmissionFollowsMoveToTheSameEndpoint(t *testing.T) {
	cfg, err := Config{Addrs: []string{"a:1"}}.resolve()
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(1000, 0))
	a := newAdmission(newCore(cfg, clk), nil, nil, nil)
	t.Cleanup(func() { _ = a.close() })
	before := &dedicated{opened: clk.Now()}
	a.live[before] = struct{}{}
	clk.Advance(time.Second)

	a.moving("", movingNotice{seq: 9, within: 10 * time.Second})
	meanwhile := &dedicated{opened: clk.Now().Add(time.Second)}
	a.mu.Lock()
	assert.False(t, a.staleLocked(before), "stale before half the announced time")
	assert.Equal(t, "", a.endpointLocked(""))
	due, moves := a.dueLocked(meanwhile)
	a.mu.Unlock()
	assert.True(t, moves, "a connection opened after the announcement is not due to move")
	assert.Equal(t, 5*time.Second, due)

	clk.Advance(5 * time.Second)
	a.mu.Lock()
	assert.True(t, a.staleLocked(before), "not stale at half the announced time")
	assert.True(t, a.staleLocked(meanwhile))
	a.mu.Unlock()
	fresh := &dedicated{opened: clk.Now()}
	a.mu.Lock()
	assert.False(t, a.staleLocked(fresh), "one dialled after the move is stale")
	a.mu.Unlock()
}

// poolConn stands for go-redis's connection, which names the socket under
// it.
type poolConn struct{ nc net.Conn }

func (p poolConn) GetNetConn() net.Conn { return p.nc }

// A subscription's connection told MOVING to a named endpoint is closed at
// once, so that its PubSub subscribes again now, and the move is told when
// the new connection's first reply arrives. One told to move to the same
// endpoint is left to go-redis's timing, and its move is told too.
func TestSubscriptionHandedOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		to     string
		closed bool
	}{
		{"to a new endpoint", "b:1", true},
		{"to the same endpoint", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSubscriptionsFixture(t)
			old, _ := f.dial(t, "a:1")
			write(t, old, subscribeX)
			f.s.handedOff(poolConn{old}, movingNotice{seq: 1, within: 10 * time.Second, to: tc.to})
			f.s.handedOff(poolConn{new(net.TCPConn)}, movingNotice{seq: 1, to: tc.to}) // not a subscription's: ignored
			f.s.handedOff(new(int), movingNotice{seq: 1, to: tc.to})                   // not go-redis's: ignored
			_, err := old.Write([]byte(pingCmd))
			assert.Equal(t, tc.closed, err != nil, "closed at once")
			require.NoError(t, old.Close()) // go-redis's reconnect

			moved, server := f.dial(t, "b:1")
			write(t, moved, subscribeX)
			reply(t, moved, server, subscribedX)
			require.Len(t, f.moves(), 1)
			assert.Equal(t, "a:1", f.moves()[0].Addr)
			assert.Equal(t, "b:1", f.moves()[0].To)
		})
	}
}
