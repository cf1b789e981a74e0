package redisguard

import (
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9/maintnotifications"
)

// A MOVING notification tells a connection that its endpoint is about to
// move: go-redis re-dials the pooled connections it reaches to the endpoint
// named, and a subscription's PubSub re-subscribes there, but the
// connections redisguard runs blocking calls on are its own (dedicated.go).
// They follow the announcement as go-redis's would: a blocking call
// waiting on the node is ended with CLIENT UNBLOCK, proved unanswered by
// its -UNBLOCKED reply, and sent again at the new endpoint within what is
// left of its wait; later calls dial the new endpoint (dedicated_moving.go).

// movingNotice is one MOVING notification: ["MOVING", seq, seconds,
// endpoint]. An endpoint of null (or none, or "null") means the same one,
// re-dialled once half of the seconds have passed, as go-redis does: the
// endpoint's name leads to the new place by then.
type movingNotice struct {
	seq    int64
	within time.Duration // the announced time by which the old endpoint goes away
	to     string        // "" for the same endpoint
}

// parseMoving reads a MOVING notification as go-redis's push processor
// hands it over; ok is false for anything else or a malformed one.
func parseMoving(n []interface{}) (m movingNotice, ok bool) {
	if len(n) < 3 {
		return m, false
	}
	if kind, _ := n[0].(string); kind != maintnotifications.NotificationMoving {
		return m, false
	}
	seq, ok1 := n[1].(int64)
	secs, ok2 := n[2].(int64)
	if !ok1 || !ok2 || secs < 0 {
		return m, false
	}
	m = movingNotice{seq: seq, within: time.Duration(secs) * time.Second}
	if len(n) > 3 && n[3] != nil {
		to, isString := n[3].(string)
		if !isString {
			return movingNotice{}, false
		}
		if !strings.EqualFold(to, "null") {
			m.to = to
		}
	}
	return m, true
}

// nodeMove is where a node's blocking calls go after an announced move,
// from when.
type nodeMove struct {
	seq  int64
	to   string    // the new endpoint; "" for the node's own, re-dialled
	from time.Time // when calls begun before it move, and new ones dial to
}

// plan is the move m announces at now: to its endpoint at once, or to the
// same endpoint, re-dialled, after half its time.
func (m movingNotice) plan(now time.Time) nodeMove {
	mv := nodeMove{seq: m.seq, to: m.to, from: now}
	if m.to == "" {
		mv.from = now.Add(m.within / 2)
	}
	return mv
}

// replaces reports whether mv, announced, supersedes cur, the move the
// node already follows: every connection of a node hears the same
// announcement, and only a new one (another sequence number) moves the
// calls again.
func (mv nodeMove) replaces(cur nodeMove, known bool) bool {
	return !known || mv.seq != cur.seq || mv.to != cur.to
}

// stale reports whether a connection to dialled (the endpoint it was
// dialled to, "" for the node's own), opened at opened, is one mv moves
// away from, at now: it was opened before the move took effect, and is not
// at the new endpoint already.
func (mv nodeMove) stale(dialled string, opened, now time.Time) bool {
	if now.Before(mv.from) || !opened.Before(mv.from) {
		return false
	}
	return mv.to == "" || dialled != mv.to
}

// endpoint is where a connection opened at now dials: the new endpoint
// once the move took effect, the node's own ("") otherwise.
func (mv nodeMove) endpoint(now time.Time) string {
	if now.Before(mv.from) {
		return ""
	}
	return mv.to
}

// handedOff is told that conn, a go-redis connection, read m. A
// subscription's PubSub then closes it and subscribes again at the endpoint
// named, but only when it next reads (a message, or its health check's
// PONG, every 3s); it is closed here at once, so that the PubSub does it
// now. A move to the same endpoint is go-redis's to time: it re-dials
// after half the announced time. Either way the move is told when it
// arrives, as a broken connection's is.
func (s *subscriptions) handedOff(conn any, m movingNotice) {
	pc, ok := conn.(interface{ GetNetConn() net.Conn })
	if !ok {
		return
	}
	c, ok := pc.GetNetConn().(*subscriptionConn)
	if !ok {
		return
	}
	c.handoff.Store(true)
	if m.to != "" {
		c.breakOff()
	}
}
