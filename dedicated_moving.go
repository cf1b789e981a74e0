package redisguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
)

// How a node's dedicated connections follow a MOVING announcement (see
// moving.go). The announcement reaches admission twice over: on the
// dedicated connections themselves, whose clients ask for notifications as
// the node's do and hand it to a movingHook even while a call waits for its
// reply, and on the node's pooled connections, through maintHook. Either
// one moves the node:
//
//   - A connection opened from then on dials the new endpoint (socketHook),
//     and an idle one opened before is closed rather than reused.
//   - A call waiting on a connection opened before is ended with CLIENT
//     UNBLOCK ... ERROR, on a connection to the very endpoint the call
//     waits on (controlFor), and sent again on a new connection if its
//     -UNBLOCKED reply proves it unanswered (see onDedicated). A reply that
//     beats the UNBLOCK is delivered. A call UNBLOCK cannot end is cut off
//     as a cancelled one would be, and ends as any call whose connection
//     broke: ErrOutcomeUnknown unless it may be sent again.
//
// Only single-command calls move: a batch's earlier replies may have been
// read already. A batch waits on where it was sent.

// errMoved is the cause a call's context is cancelled with to move it.
var errMoved = errors.New("redisguard: the node announced a move")

// maxMoves bounds how often one call is sent again for moves: a node that
// announces yet another gets the call refused as unavailable.
const maxMoves = 3

// movingHook hands the MOVING notifications a dedicated connection reads
// to its admission, from the maintenance notifications manager of the
// connection's client. go-redis runs it on the goroutine reading the
// call's reply, as soon as the notification arrives, so it does not block.
//
// The shell asks for notifications only to hear MOVING: it has go-redis
// apply none of them. A relaxed timeout (MIGRATING, FAILING_OVER) would
// replace a blocking call's own read timeout, so that a BLPOP waiting
// forever would fail after RelaxedTimeout; and a hand-over would be of a
// connection that admission moves itself.
type movingHook struct {
	a  *admission
	sh *shell
}

func (h movingHook) PreHook(_ context.Context, _ push.NotificationHandlerContext, kind string, n []interface{}) ([]interface{}, bool) {
	if kind != maintnotifications.NotificationMoving {
		return n, false
	}
	if m, ok := parseMoving(n); ok {
		if d := h.sh.owner.Load(); d != nil {
			h.a.moving(d.key, m)
		}
	}
	return n, false
}

func (movingHook) PostHook(context.Context, push.NotificationHandlerContext, string, []interface{}, error) {
}

// hearMoving has sh's client hand its MOVING notifications to a. A client
// without notifications (off, or RESP2) is never sent any.
func (a *admission) hearMoving(sh *shell) {
	if m := sh.client.GetMaintNotificationsManager(); m != nil {
		m.AddNotificationHook(movingHook{a: a, sh: sh})
	}
}

// moving moves the dedicated connections of the node at key (see above) as
// m announces; an announcement the node already follows changes nothing.
func (a *admission) moving(key string, m movingNotice) {
	now := a.k.clock.Now()
	mv := m.plan(now)
	a.mu.Lock()
	cur, known := a.moves[key]
	if a.closed || !mv.replaces(cur, known) {
		a.mu.Unlock()
		return
	}
	if a.moves == nil {
		a.moves = make(map[string]nodeMove)
	}
	a.moves[key] = mv
	var calls []*dedicated
	for d := range a.live {
		if d.key == key {
			if _, moves := a.dueLocked(d); moves {
				calls = append(calls, d)
			}
		}
	}
	a.mu.Unlock()
	node := key
	if node == "" && len(a.k.cfg.Addrs) > 0 {
		node = a.k.cfg.Addrs[0] // Standalone: the one server
	}
	a.k.log.Info("redisguard: a node announced a move; its blocking calls follow",
		"node", node, "to", mv.to, "in", mv.from.Sub(now))
	for _, d := range calls {
		d.moveBy(mv.from.Sub(now))
	}
}

// staleLocked reports whether d is at an endpoint its node has moved from.
// Called with a.mu held.
func (a *admission) staleLocked(d *dedicated) bool {
	mv, ok := a.moves[d.key]
	return ok && mv.stale(d.dialled, d.opened, a.k.clock.Now())
}

// discardAll discards each of ds.
func (a *admission) discardAll(ds []*dedicated) {
	for _, d := range ds {
		a.discard(d)
	}
}

// dueLocked reports whether the move d's node announced moves d's calls
// later, and in how long. Called with a.mu held.
func (a *admission) dueLocked(d *dedicated) (time.Duration, bool) {
	mv, ok := a.moves[d.key]
	if !ok || !mv.stale(d.dialled, d.opened, mv.from) {
		return 0, false
	}
	return mv.from.Sub(a.k.clock.Now()), true
}

// endpointLocked is where a new dedicated connection to the node at key
// dials: "" for the node's own address. Called with a.mu held.
func (a *admission) endpointLocked(key string) string {
	mv, ok := a.moves[key]
	if !ok {
		return ""
	}
	return mv.endpoint(a.k.clock.Now())
}

// controlFor is the client that CLIENT UNBLOCK for a call on d goes
// through. Until d's node announces a move, the node's long client, whose
// pooled connections are all to the node. After one, go-redis may have
// handed them to the new endpoint while d still waits on the old one, and a
// client id names a client of one server only: UNBLOCK goes through a
// client of d's own endpoint, with no notifications, which stays there.
func (a *admission) controlFor(d *dedicated) *redis.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, moved := a.moves[d.key]; !moved || a.closed {
		return d.control
	}
	addr := d.dialled
	if addr == "" {
		addr = d.control.Options().Addr
	}
	if d.control.Options().TLSConfig == nil {
		// The very server, even where the name leads elsewhere by now (a
		// move to the same endpoint). With TLS the name stays: a
		// certificate names the server, not its address.
		if r := d.remote(); r != "" {
			addr = r
		}
	}
	if c := a.controls[addr]; c != nil {
		return c
	}
	c := newGoRedis(clientSpec{kind: clientProbe, base: d.control.Options(), addr: addr, wait: unblockGrace}).(*redis.Client)
	if a.controls == nil {
		a.controls = make(map[string]*redis.Client)
	}
	a.controls[addr] = c
	return c
}

// remote is the address d's socket is connected to; "" before its dial.
func (d *dedicated) remote() string {
	d.mu.Lock()
	s := d.sock
	d.mu.Unlock()
	if s == nil {
		return ""
	}
	return s.RemoteAddr().String()
}

// following arms d's call in progress to be moved with move, or, nil,
// disarms it when the call ends.
func (d *dedicated) following(move context.CancelCauseFunc) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.move = move
	if move == nil {
		if d.moveTimer != nil {
			d.moveTimer.Stop()
			d.moveTimer = nil
		}
		return
	}
	d.armLocked()
}

// moveBy has the call on d, the one in progress or the next one, moved in
// after (at once if not positive).
func (d *dedicated) moveBy(after time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.moveAt = time.Now().Add(after)
	d.armLocked()
}

// armLocked moves d's call when one is in progress and a move is due.
// Real time paces it: the announced time is the server's. Called with d.mu
// held.
func (d *dedicated) armLocked() {
	if d.move == nil || d.moveAt.IsZero() || d.moveTimer != nil {
		return
	}
	after := time.Until(d.moveAt)
	if after <= 0 {
		d.move(errMoved)
		return
	}
	move := d.move
	d.moveTimer = time.AfterFunc(after, func() { move(errMoved) })
}

// movedCall decides what a call that was moved (see run) does with err, its
// result on the connection it left: sent again (again), or delivered as it
// is. moves counts the times it was sent again already.
func movedCall(cmd redis.Cmder, err error, moves int) (again bool, result error) {
	switch {
	case err == nil || err == redis.Nil:
		return false, err // the reply beat the UNBLOCK
	case !isUnblocked(err):
		return false, err // a reply of its own, or a connection cut off: the usual rules
	case moves >= maxMoves:
		return false, fmt.Errorf("%w: the node moved %d times during the call", ErrNodeUnavailable, moves+1)
	}
	cmd.SetErr(nil)
	return true, nil
}
