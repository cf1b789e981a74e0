package redisguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// The sentinel a client listens to goes quiet (its traffic is black-holed),
// so no +switch-master reaches the client, and the master is failed over.
// Both clients find the new master; redisguard's breaker follows its address
// and no write of redisguard's is answered READONLY.
func TestSentinelSwitchMasterThatNeverArrives(t *testing.T) {
	sideBySide(t)
	g := redistest.StartSentinel(t)
	proxy, err := faultproxy.New(g.Sentinels[0].Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	addrs := []string{proxy.Addr()}
	stock := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: addrs, ReadTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = stock.Close() })
	guard := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: addrs, ReadTimeout: 500 * time.Millisecond})
	ctx := testCtx(t, time.Minute)

	clients := []struct {
		name string
		c    redis.UniversalClient
	}{{"go-redis", stock}, {"redisguard", guard}}
	for _, cl := range clients {
		fillPool(ctx, t, cl.c)
	}
	redistest.WaitFor(t, 10*time.Second, "redisguard to learn the other sentinels", func() error {
		guard.sentinel.mu.Lock()
		defer guard.sentinel.mu.Unlock()
		if n := len(guard.sentinel.sentinels); n < 3 {
			return fmt.Errorf("%d sentinels known", n)
		}
		return nil
	})

	old := g.Master.Addr
	require.NoError(t, proxy.SetMode(faultproxy.Blackhole))
	require.NoError(t, g.Sentinels[1].Admin().Do(ctx, "sentinel", "failover", g.MasterName).Err())
	waitNewMaster(t, g.Sentinels[1:], old)
	newMaster := g.Replica.Addr
	redistest.WaitFor(t, 20*time.Second, "the old master to become a replica", func() error {
		role, err := g.Master.Admin().Do(ctx, "role").Slice()
		if err != nil || len(role) == 0 || role[0] != "slave" {
			return fmt.Errorf("role %v, %v", role, err)
		}
		return nil
	})

	readOnly := map[string]int{}
	took := map[string]time.Duration{}
	for _, cl := range clients {
		start := time.Now()
		redistest.WaitFor(t, 20*time.Second, cl.name+" to write to the new master", func() error {
			err := cl.c.Set(ctx, "ro:key", cl.name, 0).Err()
			if redis.IsReadOnlyError(err) {
				readOnly[cl.name]++
			}
			return err
		})
		took[cl.name] = time.Since(start)
	}
	t.Logf("first write after the old master became a replica: go-redis %v (%d READONLY), redisguard %v (%d READONLY)",
		took["go-redis"].Round(time.Millisecond), readOnly["go-redis"], took["redisguard"].Round(time.Millisecond), readOnly["redisguard"])
	assert.Zero(t, readOnly["redisguard"], "redisguard wrote to the demoted master")
	assert.Equal(t, newMaster, guard.sentinel.node().addr, "redisguard charges the master's commands to the old address")
}

// A sentinel that cannot name the others when first asked (its answer came
// late, or the group was still forming) is asked again, though the master
// stays healthy, until one does: the others are what a failover that takes
// this sentinel along with the master needs. Once they are known, the
// look-up ends, and a healthy client runs nothing in the background.
func TestSentinelPeersAskedAgainUntilNamed(t *testing.T) {
	g := redistest.StartSentinel(t)
	proxy, err := faultproxy.New(g.Sentinels[0].Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	// SENTINEL SENTINELS is answered PONG: an error that is not a refusal.
	proxy.Stub("sentinel", "sentinels")
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: []string{proxy.Addr()}})
	sm := c.sentinel
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())

	state := func() (known int, watching bool) {
		sm.mu.Lock()
		defer sm.mu.Unlock()
		return len(sm.sentinels), sm.watching
	}
	known, watching := state()
	require.Equal(t, 1, known, "the stub did not hide the other sentinels")
	require.True(t, watching, "the look-up ended without having learned the other sentinels")

	proxy.Unstub()
	redistest.WaitFor(t, 5*sentinelRediscover, "the other sentinels to be learned", func() error {
		if known, _ := state(); known < 3 {
			return fmt.Errorf("%d sentinels known", known)
		}
		return nil
	})
	redistest.WaitFor(t, 5*sentinelRediscover, "the look-up to end", func() error {
		if _, watching := state(); watching {
			return errors.New("still looking")
		}
		return nil
	})
}

// A write answered READONLY (the client's connection leads to a node that is
// no longer the master) makes the client ask the sentinels at once; it
// switches to the master they name and closes its connections to the old
// address. Here the connection goes to the replica on purpose.
func TestSentinelReadOnlyReplyAsksTheSentinels(t *testing.T) {
	g := redistest.StartSentinel(t)
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs()})
	sm := c.sentinel
	ctx := testCtx(t, 30*time.Second)

	// The client has met the master, and its first-contact look-up has
	// finished.
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, g.Master.Addr, sm.node().addr)
	redistest.WaitFor(t, 5*time.Second, "the first-contact look-up to end", func() error {
		sm.mu.Lock()
		defer sm.mu.Unlock()
		if sm.watching {
			return errors.New("still looking")
		}
		return nil
	})

	// A go-redis client on the replica, with the sentinel hook that the
	// client installs on its failover clients, taking the replica for the
	// master.
	onReplica := redis.NewClient(&redis.Options{Addr: g.Replica.Addr})
	onReplica.AddHook(sm)
	t.Cleanup(func() { _ = onReplica.Close() })
	require.NoError(t, onReplica.Ping(ctx).Err())
	require.Equal(t, g.Replica.Addr, sm.node().addr)
	sm.mu.Lock()
	tracked := len(sm.conns[g.Replica.Addr])
	sm.mu.Unlock()
	require.Equal(t, 1, tracked)

	err := onReplica.Set(ctx, "k", "v", 0).Err()
	require.True(t, redis.IsReadOnlyError(err), "write to the replica: %v", err)
	redistest.WaitFor(t, 5*time.Second, "the client to move to the master the sentinels name", func() error {
		if a := sm.node().addr; a != g.Master.Addr {
			return fmt.Errorf("charged to %s", a)
		}
		return nil
	})
	sm.mu.Lock()
	left := len(sm.conns[g.Replica.Addr])
	sm.mu.Unlock()
	assert.Zero(t, left, "connections to the old address stayed open")
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err(), "the client writes to the master")
}

// fillPool makes c hold several connections to the master.
func fillPool(ctx context.Context, t *testing.T, c redis.UniversalClient) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if err := c.Set(ctx, "ro:fill", "v", 0).Err(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, errors.Join(func() []error {
		var out []error
		for err := range errs {
			out = append(out, err)
		}
		return out
	}()...))
}

// The node that stands for the master before its address is known becomes
// the address's node at the first dial; Stats name addresses, not the role.
func TestSentinelBreakerIsNamedAfterTheAddress(t *testing.T) {
	g := redistest.StartSentinel(t)
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs()})
	ctx := testCtx(t, 20*time.Second)
	require.Equal(t, sentinelNodeName(g.MasterName), c.sentinel.node().addr)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, g.Master.Addr, c.sentinel.node().addr)
	var named bool
	for _, n := range c.Stats().Nodes {
		named = named || n.Addr == g.Master.Addr
	}
	assert.True(t, named, "no breaker for the master's address in %+v", c.Stats().Nodes)
}

// A master name the sentinels do not monitor is reported as that, not as
// go-redis's "all sentinels are unreachable: redis: nil", and it opens no
// breaker: the sentinels answered.
func TestSentinelUnknownMasterSaysSo(t *testing.T) {
	g := redistest.StartSentinel(t)
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: "no-such-master", Addrs: g.Addrs(), NodeFailureThreshold: 1})
	ctx := testCtx(t, 20*time.Second)
	for range 3 {
		err := c.Set(ctx, "k", "v", 0).Err()
		require.Error(t, err)
		assert.Contains(t, err.Error(), `the sentinels monitor no master named "no-such-master"`)
		assert.NotErrorIs(t, err, ErrNodeUnavailable)
	}
}

// A master the sentinels name is confirmed by the server itself, with a
// bare HELLO that any user may send: a replica is not taken for the
// master, and ROLE is never sent. Where a server can answer neither HELLO
// so nor ROLE (miniredis; a server older than 6.2 whose user is denied
// ROLE), the sentinels' word is taken, the log says so once, and ROLE is
// not asked again.
func TestSentinelMasterIsConfirmedWithoutRole(t *testing.T) {
	srv := redistest.StartServer(t)
	rep := redistest.StartReplica(t, srv)
	setUser(t, "app", appRules, srv, rep)
	mr := miniredis.RunT(t)
	var roles atomic.Int64
	var l eventLog
	c := newTestClient(t, Config{Mode: ModeSentinel, MasterName: "m", Addrs: []string{"127.0.0.1:1"},
		Username: "app", Password: appPassword, Logger: l.logger(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return roleCounter{conn, &roles}, nil
		}})
	ctx := testCtx(t, 10*time.Second)
	assert.True(t, c.sentinel.isMaster(ctx, srv.Addr))
	assert.False(t, c.sentinel.isMaster(ctx, rep.Addr))
	assert.Zero(t, roles.Load(), "ROLE was sent to a server that answers HELLO")
	assert.Empty(t, refusals(&l))

	mr.RequireUserAuth("app", appPassword)
	assert.True(t, c.sentinel.isMaster(ctx, mr.Addr()), "the sentinels' word")
	assert.True(t, c.sentinel.isMaster(ctx, mr.Addr()))
	assert.Equal(t, int64(1), roles.Load(), "ROLE was asked again after its refusal")
	assert.Equal(t, map[string]int{"ROLE": 1}, refusals(&l))
}

// roleCounter counts the ROLE commands written on a connection.
type roleCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c roleCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(bytes.Count(p, []byte("$4\r\nrole\r\n"))))
	return c.Conn.Write(p)
}
