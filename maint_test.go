package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/go-redis/v9/push"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// go-redis's default, maintenance notifications in auto mode, works on a
// server that does not know CLIENT MAINT_NOTIFICATIONS (Redis 7.0): the
// client is built, the handshake is refused and go-redis turns
// notifications off, and the refusal is set-up, not a node failure: with a
// breaker that opens on the first failure, nothing opens and no command
// fails.
func TestMaintNotificationsAutoOnAServerWithout(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	srv := redistest.StartServer(t)
	for _, topo := range []struct {
		name  string
		addrs []string
	}{
		{"Standalone", []string{srv.Addr}},
		{"Cluster", cluster.Addrs()},
	} {
		for _, m := range []struct {
			name string
			cfg  *maintnotifications.Config
		}{
			{"nil", nil},
			{"auto", &maintnotifications.Config{Mode: maintnotifications.ModeAuto}},
		} {
			t.Run(topo.name+"/"+m.name, func(t *testing.T) {
				c := newTestClient(t, Config{Addrs: topo.addrs, Protocol: 3, NodeFailureThreshold: 1, MinIdleConns: 2,
					MaintNotificationsConfig: m.cfg})
				ctx := testCtx(t, 10*time.Second)
				if cl, ok := c.UniversalClient.(*redis.Client); ok {
					require.NotNil(t, cl.GetMaintNotificationsManager(), "notifications are off before the first connection")
				}
				var wg sync.WaitGroup
				errs := make(chan error, 8*50)
				for w := 0; w < 8; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 50; i++ {
							key := fmt.Sprintf("maint:%d:%d", w, i)
							if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
								errs <- err
							}
							if err := c.Get(ctx, key).Err(); err != nil {
								errs <- err
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("a command failed: %v", err)
				}

				// go-redis drops a node client's manager when the server
				// refuses the handshake in auto mode.
				nodes := 0
				require.NoError(t, forEachNodeClient(ctx, c, func(cl *redis.Client) {
					nodes++
					assert.Nil(t, cl.GetMaintNotificationsManager(), "%s: notifications still on", cl.Options().Addr)
				}))
				require.Positive(t, nodes)
				st := c.Stats()
				require.NotEmpty(t, st.Nodes)
				for _, n := range st.Nodes {
					assert.Equal(t, "closed", n.State, n.Addr)
					assert.Zero(t, n.Opens, "breaker openings on %s", n.Addr)
					assert.Zero(t, n.ConsecutiveFailures, "failures scored on %s", n.Addr)
				}
				t.Logf("%d node clients turned notifications off, %d breakers, none opened", nodes, len(st.Nodes))
			})
		}
	}
}

// forEachNodeClient calls fn with the go-redis client of each node c's
// ordinary client talks to.
func forEachNodeClient(ctx context.Context, c *Client, fn func(*redis.Client)) error {
	switch u := c.UniversalClient.(type) {
	case *redis.Client:
		fn(u)
		return nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		return u.ForEachShard(ctx, func(_ context.Context, cl *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			fn(cl)
			return nil
		})
	}
	return fmt.Errorf("%T", c.UniversalClient)
}

// The maintenance window, step by step on a fake clock: each step is a
// notification on a connection (or none), a move of the clock, and whether
// the node is under maintenance afterwards.
func TestMaintenanceWindow(t *testing.T) {
	const bound, movingWithin = 10 * time.Second, 15 * time.Second
	type step struct {
		advance time.Duration
		conn    string // the connection the notification came on
		kind    string // "" for none
		active  bool
	}
	const (
		migrating = maintnotifications.NotificationMigrating
		migrated  = maintnotifications.NotificationMigrated
		failing   = maintnotifications.NotificationFailingOver
		failed    = maintnotifications.NotificationFailedOver
		moving    = maintnotifications.NotificationMoving
	)
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing announced", []step{{0, "", "", false}, {time.Hour, "", "", false}}},
		{"MIGRATING until MIGRATED", []step{
			{0, "c1", migrating, true},
			{3 * time.Second, "", "", true},
			{0, "c1", migrated, false},
			{time.Second, "", "", false},
		}},
		{"FAILING_OVER until FAILED_OVER", []step{
			{0, "c1", failing, true},
			{time.Second, "c1", failed, false},
		}},
		{"no end: the relaxed timeout bounds it", []step{
			{0, "c1", migrating, true},
			{bound - time.Millisecond, "", "", true},
			{time.Millisecond, "", "", false},
			{time.Hour, "", "", false},
		}},
		{"a second announcement extends it", []step{
			{0, "c1", migrating, true},
			{6 * time.Second, "c1", migrating, true},
			{6 * time.Second, "", "", true},
			{5 * time.Second, "", "", false},
		}},
		{"open while any announced connection is", []step{
			{0, "c1", migrating, true},
			{time.Second, "c2", migrating, true},
			{time.Second, "c1", migrated, true},
			{time.Second, "c2", migrated, false},
		}},
		{"the bound of each connection", []step{
			{0, "c1", migrating, true},
			{5 * time.Second, "c2", migrating, true},
			{0, "c2", migrated, true},
			{5 * time.Second, "", "", false},
		}},
		{"an end for a connection never announced", []step{
			{0, "c2", migrated, false},
			{0, "c1", migrating, true},
			{0, "c2", migrated, true},
		}},
		{"a new window after one closed", []step{
			{0, "c1", migrating, true},
			{0, "c1", migrated, false},
			{time.Minute, "", "", false},
			{0, "c1", failing, true},
			{bound, "", "", false},
		}},
		{"MOVING: its time and the hand-off's relaxation", []step{
			{0, "c1", moving, true},
			{movingWithin + 2*bound - time.Millisecond, "", "", true},
			{time.Millisecond, "", "", false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(slowEpoch)
			n := &node{addr: "a:1"}
			h := maintHook{n: n, clock: clk, bound: bound, afterMove: 2 * bound}
			conns := map[string]*int{}
			for i, s := range tt.steps {
				clk.Advance(s.advance)
				if s.kind != "" {
					if conns[s.conn] == nil {
						conns[s.conn] = new(int)
					}
					nc := push.NotificationHandlerContext{Conn: conns[s.conn]}
					note := []interface{}{s.kind, int64(i)}
					if s.kind == moving {
						note = append(note, int64(movingWithin/time.Second))
					}
					got, proceed := h.PreHook(context.Background(), nc, s.kind, note)
					assert.True(t, proceed, "the hook stops go-redis's handling")
					assert.Equal(t, note, got, "the hook changes the notification")
					h.PostHook(context.Background(), nc, s.kind, got, nil)
				}
				assert.Equal(t, s.active, n.maint.active(clk.Now()), "step %d: %+v", i, s)
			}
		})
	}
}

// A notification go-redis failed to apply relaxed nothing: it opens no
// window.
func TestMaintenanceIgnoresFailedNotifications(t *testing.T) {
	clk := clock.NewFake(slowEpoch)
	n := &node{addr: "a:1"}
	h := maintHook{n: n, clock: clk, bound: time.Second}
	h.PostHook(context.Background(), push.NotificationHandlerContext{Conn: new(int)}, maintnotifications.NotificationMigrating, nil, maintnotifications.ErrInvalidNotification)
	h.PostHook(context.Background(), push.NotificationHandlerContext{}, maintnotifications.NotificationMigrating, nil, nil)
	assert.False(t, n.maint.active(clk.Now()))
}

// A MOVING go-redis applied is handed on, parsed, with the connection it
// came on, and opens the node's window; one it refused, or a malformed
// one, does neither.
func TestMaintHookHandsOnMoving(t *testing.T) {
	clk := clock.NewFake(slowEpoch)
	type heard struct {
		conn any
		m    movingNotice
	}
	var got []heard
	h := maintHook{n: &node{addr: "a:1"}, clock: clk, bound: time.Second,
		moved: func(conn any, m movingNotice) { got = append(got, heard{conn, m}) }}
	conn := new(int)
	nc := push.NotificationHandlerContext{Conn: conn}
	note := []interface{}{"MOVING", int64(2), int64(15), "b:1"}
	h.PostHook(context.Background(), nc, maintnotifications.NotificationMoving, note, maintnotifications.ErrInvalidNotification)
	h.PostHook(context.Background(), nc, maintnotifications.NotificationMoving, []interface{}{"MOVING", "x"}, nil)
	h.PostHook(context.Background(), nc, maintnotifications.NotificationMoving, note, nil)
	require.Len(t, got, 1)
	assert.Same(t, conn, got[0].conn)
	assert.Equal(t, movingNotice{seq: 2, within: 15 * time.Second, to: "b:1"}, got[0].m)
	assert.True(t, h.n.maint.active(clk.Now()), "a MOVING opened no maintenance window")
}

// A wait overlaps the window when it began before the window closed and
// ended after it opened.
func TestMaintenanceOverlaps(t *testing.T) {
	var m maintenance
	from := slowEpoch.Add(time.Minute)
	conn := new(int)
	m.begin(conn, from, 10*time.Second)
	m.end(conn, from.Add(2*time.Second))
	for _, tt := range []struct {
		name       string
		start, end time.Duration // from the window's opening
		want       bool
	}{
		{"before", -3 * time.Second, -time.Second, false},
		{"into it", -time.Second, time.Second, true},
		{"inside", 0, time.Second, true},
		{"across it", -time.Second, 5 * time.Second, true},
		{"out of it", time.Second, 5 * time.Second, true},
		{"after", 3 * time.Second, 4 * time.Second, false},
	} {
		assert.Equal(t, tt.want, m.overlaps(from.Add(tt.start), from.Add(tt.end)), tt.name)
	}
}

// Under an announced maintenance a node's timeouts are neutral to its
// breaker, its silence opens nothing and its waits mark it no slower; once
// the window closes each counts again.
func TestMaintenanceKeepsTheGuardsQuiet(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	announce := func(n *node, clk *clock.Fake, bound time.Duration) func() {
		h := maintHook{n: n, clock: clk, bound: bound}
		conn := new(int)
		h.PostHook(context.Background(), push.NotificationHandlerContext{Conn: conn}, maintnotifications.NotificationMigrating, nil, nil)
		return func() {
			h.PostHook(context.Background(), push.NotificationHandlerContext{Conn: conn}, maintnotifications.NotificationMigrated, nil, nil)
		}
	}

	t.Run("breaker", func(t *testing.T) {
		f := newHangFixture(t, "a:1")
		n := f.node("a:1")
		g := f.nodes.guard("a:1")
		ctx := context.Background()
		end := announce(n, f.clk, 10*time.Second)
		assert.Equal(t, breaker.Neutral, g.outcome(n, ctx, timeout), "a timeout under maintenance")
		assert.Equal(t, breaker.Failure, g.outcome(n, ctx, errors.New("ERR-less failure")), "what is no timeout still counts")
		end()
		assert.Equal(t, breaker.Failure, g.outcome(n, ctx, timeout), "a timeout after the window")
		announce(n, f.clk, 10*time.Second)
		f.clk.Advance(10 * time.Second)
		assert.Equal(t, breaker.Failure, g.outcome(n, ctx, timeout), "a timeout past the relaxed timeout")
	})

	t.Run("hang watch", func(t *testing.T) {
		f := newHangFixture(t, "a:1", "b:1")
		f.tick(hangTick)
		a, b := f.conn("a:1"), f.conn("b:1")
		end := announce(f.node("a:1"), f.clk, 10*time.Second)
		ask(a)
		f.run(3*DefaultHungNodeAfter, chatter(b))
		assert.Empty(t, f.opened(), "a node under maintenance was found hung")
		end()
		f.run(DefaultHungNodeAfter-2*hangTick, chatter(b))
		assert.Empty(t, f.opened(), "its silence counts from the window's end")
		f.run(4*hangTick, chatter(b))
		require.Len(t, f.opened(), 1, "silent past HungNodeAfter after the window")
		assert.Equal(t, "a:1", f.opened()[0].Addr)
	})

	t.Run("slow-node detector", func(t *testing.T) {
		f := newSlowFixture(t, Config{MaxConnections: 40})
		a, _ := f.nodes.lookup("a:1")
		f.run(3*time.Second, nil)
		end := announce(a, f.clk, time.Minute)
		slowA := map[string]time.Duration{"a:1": 80 * time.Millisecond}
		f.run(3*DefaultSlowNodeMarkAfter, slowA)
		assert.False(t, a.slow.Load(), "marked slow under maintenance")
		assert.Empty(t, f.kinds())
		end()
		f.run(DefaultSlowNodeMarkAfter+2*time.Second, slowA)
		assert.True(t, a.slow.Load(), "slow after the window, and not marked")
	})
}

// The end of a slot migration, announced as SMIGRATED on a connection of
// the source, refreshes the slot map at once, through the one cache:
// before it, nothing had asked for one.
func TestSlotMigrationEndRefreshesTheSlotMap(t *testing.T) {
	proxies := map[int]*faultproxy.Proxy{}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2, Announce: func(port int) int {
		p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		p.Stub("client", "maint_notifications")
		proxies[port] = p
		_, to, _ := net.SplitHostPort(p.Addr())
		n, _ := strconv.Atoi(to)
		return n
	}})
	from, to := cl.Masters[0], cl.Masters[1]
	moved := cl.KeyOn(t, from, "migrated:")
	other := cl.KeyOn(t, from, "stays:")
	for redistest.Slot(other) == redistest.Slot(moved) {
		other = cl.KeyOn(t, from, other)
	}
	c := newTestClient(t, Config{Addrs: cl.ClientAddrs(), Mode: ModeCluster, Protocol: 3})
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, moved, "v", time.Minute).Err())
	require.NoError(t, c.Set(ctx, other, "v", time.Minute).Err())

	slot := redistest.Slot(moved)
	cl.MigrateSlot(t, slot, from, to, 10)
	before := c.Stats().TopologyRefreshes
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, c.Get(ctx, other).Err())
	require.Equal(t, before, c.Stats().TopologyRefreshes, "a refresh before the announcement")

	src, dst := cl.ClientAddr(from), cl.ClientAddr(to)
	s := strconv.Itoa(slot)
	frame := ">3\r\n$9\r\nSMIGRATED\r\n:7\r\n*1\r\n*3\r\n" +
		"$" + strconv.Itoa(len(src)) + "\r\n" + src + "\r\n" +
		"$" + strconv.Itoa(len(dst)) + "\r\n" + dst + "\r\n" +
		"$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n"
	require.Positive(t, proxies[from.Port].Push([]byte(frame)))
	// A connection reads the notification with its next reply.
	redistest.WaitFor(t, 5*time.Second, "a refresh after SMIGRATED", func() error {
		if err := c.Get(ctx, other).Err(); err != nil {
			return err
		}
		if c.Stats().TopologyRefreshes == before {
			return fmt.Errorf("%d refreshes", before)
		}
		return nil
	})
	require.NoError(t, c.Get(ctx, moved).Err())
}
