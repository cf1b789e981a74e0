package redisguard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"

	"github.com/redisguard/redisguard/internal/clock"
)

// maintenance is the window in which a node is under an announced
// maintenance: from the first connection of the node told MIGRATING,
// FAILING_OVER or SMIGRATING until every connection so told has been told
// MIGRATED, FAILED_OVER or SMIGRATED, and never longer than the relaxed
// timeout past the latest announcement; a MOVING opens one for its
// announced time and the relaxation go-redis keeps on the connections it
// hands off after it (PostHandoffRelaxedDuration). go-redis relaxes those
// connections' timeouts for that time; the guards treat the node's waits
// then as the maintenance's, not the node's: the hang watch does not judge
// its silence, the slow-node detector neither samples nor marks it, a mark
// it carries limits none of its callers, and its timeouts are neutral to
// its breaker.
//
// The zero value has no window. Announcements are rare: they take mu;
// the guards read the window from an immutable snapshot.
type maintenance struct {
	mu    sync.Mutex
	conns map[any]time.Time // guarded by mu: each announced connection, until when its announcement holds

	window atomic.Pointer[maintWindow] // nil before the first announcement
}

// maintWindow is one maintenance window; until is when it closed, or when
// it closes unless announced again.
type maintWindow struct {
	from, until time.Time
}

// begin records that conn announced a maintenance at now, which holds for
// bound at most.
func (m *maintenance) begin(conn any, now time.Time, bound time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns == nil {
		m.conns = make(map[any]time.Time)
	}
	m.conns[conn] = now.Add(bound)
	from := now
	if w := m.window.Load(); w != nil && now.Before(w.until) {
		from = w.from // the window is open: it goes on
	}
	m.publish(from, now)
}

// end records that conn announced at now the end of its maintenance.
func (m *maintenance) end(conn any, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.conns[conn]; !ok {
		return
	}
	delete(m.conns, conn)
	w := m.window.Load()
	if w == nil || !now.Before(w.until) {
		return // closed already, on its bound
	}
	m.publish(w.from, now)
}

// publish stores the window from from, until the latest announcement that
// still holds at now, or until now when none does. Called with mu held.
func (m *maintenance) publish(from, now time.Time) {
	until := now
	for conn, u := range m.conns {
		if !u.After(now) {
			delete(m.conns, conn)
			continue
		}
		if u.After(until) {
			until = u
		}
	}
	m.window.Store(&maintWindow{from: from, until: until})
}

// active reports whether the node is under maintenance at now.
func (m *maintenance) active(now time.Time) bool {
	w := m.window.Load()
	return w != nil && !now.Before(w.from) && now.Before(w.until)
}

// overlaps reports whether the node was under maintenance at any time
// between start and now: a wait that began before an announcement, or
// ended after its window closed, waited on the maintenance too.
func (m *maintenance) overlaps(start, now time.Time) bool {
	w := m.window.Load()
	return w != nil && !now.Before(w.from) && start.Before(w.until)
}

// maintHook tells a node's maintenance what go-redis's maintenance
// notifications manager of one node client has processed, and moved the
// MOVING announcements, with the go-redis connection each came on. It
// changes no notification.
type maintHook struct {
	n     *node
	clock clock.Clock
	bound time.Duration // the relaxed timeout go-redis applies
	// afterMove is how long go-redis keeps the connections it hands off
	// on a MOVING relaxed after the hand-off.
	afterMove time.Duration
	moved     func(conn any, m movingNotice)
}

// watchMaintenance registers n's maintHook with the maintenance
// notifications manager of cl, a client of n alone; a client without one
// (notifications off) is left as it is. moved, if set, hears the node's
// MOVING announcements.
func watchMaintenance(cl *redis.Client, n *node, clk clock.Clock, moved func(conn any, m movingNotice)) {
	m := cl.GetMaintNotificationsManager()
	if m == nil {
		return
	}
	mc := cl.Options().MaintNotificationsConfig
	afterMove := mc.PostHandoffRelaxedDuration
	if afterMove == 0 {
		afterMove = 2 * mc.RelaxedTimeout // go-redis's default
	}
	m.AddNotificationHook(maintHook{n: n, clock: clk, bound: mc.RelaxedTimeout, afterMove: afterMove, moved: moved})
}

func (h maintHook) PreHook(_ context.Context, _ push.NotificationHandlerContext, _ string, notification []interface{}) ([]interface{}, bool) {
	return notification, true
}

// PostHook opens or closes n's window for the connection the notification
// came on, once go-redis has applied it to the connection's timeouts.
func (h maintHook) PostHook(_ context.Context, nc push.NotificationHandlerContext, kind string, notification []interface{}, result error) {
	if result != nil || nc.Conn == nil {
		return
	}
	switch kind {
	case maintnotifications.NotificationMoving:
		m, ok := parseMoving(notification)
		if !ok {
			return
		}
		// No notification ends a move: the window holds until the old
		// endpoint goes, and the handed-off connections' relaxation ends.
		h.n.maint.begin(nc.Conn, h.clock.Now(), m.within+h.afterMove)
		if h.moved != nil {
			h.moved(nc.Conn, m)
		}
	case maintnotifications.NotificationMigrating, maintnotifications.NotificationFailingOver, maintnotifications.NotificationSMigrating:
		h.n.maint.begin(nc.Conn, h.clock.Now(), h.bound)
	case maintnotifications.NotificationMigrated, maintnotifications.NotificationFailedOver, maintnotifications.NotificationSMigrated:
		h.n.maint.end(nc.Conn, h.clock.Now())
	}
}

// reloadOnMigrated has the maintenance notifications manager of cl, a node
// client of a cluster client, answer the end of a slot migration it was
// told of (SMIGRATED) with a slot-map refresh through topo, which reloads
// every cluster client of the Client through the one single-flight cache.
// go-redis's own answer reloads only the cluster client that made cl, and
// only when ClusterOptions.MaintNotificationsConfig was set.
func reloadOnMigrated(cl *redis.Client, topo *topology) {
	m := cl.GetMaintNotificationsManager()
	if m == nil || topo == nil {
		return
	}
	m.SetClusterStateReloadCallback(func(context.Context, string, []string) { topo.force() })
}
