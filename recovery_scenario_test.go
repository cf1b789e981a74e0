package redisguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The recovery scenarios: a node goes away and comes back (or is replaced),
// and the first write after that is timed through go-redis alone and through
// redisguard with the default Config (only ReadTimeout lowered, as a user
// who wants timeouts to bite would), side by side in one run. redisguard
// must never come back later than go-redis.

// recoveryReadTimeout is the one setting the scenarios lower.
const recoveryReadTimeout = 500 * time.Millisecond

// writeLog records the writes of a few workers SETting through one client:
// when each successful one completed, and what failed after a mark.
type writeLog struct {
	name string
	mu   sync.Mutex
	ok   []time.Time
	errs []writeErr
}

type writeErr struct {
	at  time.Time
	err error
}

// startWrites runs workers goroutines writing keys through c until the
// returned stop is called; stop waits for them.
func startWrites(name string, c redis.UniversalClient, keys []string) (*writeLog, func()) {
	return startWriters(name, c, keys, 2)
}

// startWriters is startWrites with workers goroutines.
func startWriters(name string, c redis.UniversalClient, keys []string, workers int) (*writeLog, func()) {
	w := &writeLog{name: name}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := c.Set(ctx, keys[(i+n)%len(keys)], strconv.Itoa(n), 0).Err()
				cancel()
				now := time.Now()
				w.mu.Lock()
				if err == nil {
					w.ok = append(w.ok, now)
				} else {
					w.errs = append(w.errs, writeErr{now, err})
				}
				w.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	return w, func() { close(done); wg.Wait() }
}

// resumedAfter is how long after mark the first write completed that
// started after the fault: the first success after from, measured from mark.
// It is negative when no write succeeded.
func (w *writeLog) resumedAfter(from, mark time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.ok {
		if t.After(from) {
			return max(0, t.Sub(mark))
		}
	}
	return -1
}

// errsAfter counts the failed writes after t that match.
func (w *writeLog) errsAfter(t time.Time, match func(error) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.errs {
		if e.at.After(t) && match(e.err) {
			n++
		}
	}
	return n
}

// checkRecovery logs both figures and checks redisguard's: within limit
// after mark, and never more than slack behind go-redis.
func checkRecovery(t *testing.T, what string, stock, guard *writeLog, from, mark time.Time, limit time.Duration) {
	t.Helper()
	gr, rg := stock.resumedAfter(from, mark), guard.resumedAfter(from, mark)
	table(t, what, []string{"client", "first write after"},
		[]string{stock.name, fmtDur(gr)}, []string{guard.name, fmtDur(rg)})
	require.GreaterOrEqual(t, gr, time.Duration(0), "go-redis never wrote again")
	require.GreaterOrEqual(t, rg, time.Duration(0), "redisguard never wrote again")
	slack := pick(200*time.Millisecond, 700*time.Millisecond)
	assert.LessOrEqual(t, rg, limit, "redisguard came back too late")
	assert.LessOrEqual(t, rg, gr+slack, "redisguard came back later than go-redis alone")
}

// A standalone server is killed and started again on the same port a second
// later: a deploy, a crash. The breaker opens at once (refused dials); its
// probes find the server within a fraction of the outage.
func TestScenarioRestartedServerRecovers(t *testing.T) {
	alone(t)
	srv := redistest.StartServer(t)
	stock := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: recoveryReadTimeout})
	t.Cleanup(func() { _ = stock.Close() })
	guard := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: recoveryReadTimeout})
	keys := []string{"recover:a", "recover:b"}
	sw, stopStock := startWrites("go-redis", stock, keys)
	gw, stopGuard := startWrites("redisguard", guard, keys)

	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	srv.Kill(t)
	time.Sleep(time.Second)
	srv.Restart(t) // returns once the server answers PING
	back := time.Now()
	time.Sleep(2 * time.Second)
	stopStock()
	stopGuard()

	checkRecovery(t, "restarted standalone server: first write after it accepts connections",
		sw, gw, killed.Add(time.Second), back, pick(500*time.Millisecond, 1500*time.Millisecond))
	st := guard.Stats().Nodes[0]
	assert.Positive(t, st.Probes, "the breaker recovered without a probe")
	assert.Equal(t, "closed", st.State)
	t.Logf("redisguard: %d probes, %d failed", st.Probes, st.ProbeFailures)
}

// A standalone server killed and started again a second later, over and
// over, with 20 writers on each client and the default Config: the first
// write after the server accepts connections again, in each run. With a
// fresh pair of clients each time (services that start between deploys),
// and with one pair through every restart (a crash loop, which must not
// look like a flapping node: each restart is found as fast as the first).
func TestScenarioRestartRecoveryIsNeverBimodal(t *testing.T) {
	sideBySide(t)
	srv := redistest.StartServer(t)
	for _, fresh := range []bool{true, false} {
		name := map[bool]string{true: "fresh clients each run", false: "one client through every restart"}[fresh]
		t.Run(name, func(t *testing.T) { restartRuns(t, srv, fresh) })
	}
}

func restartRuns(t *testing.T, srv *redistest.Server, fresh bool) {
	runs := pick(10, 3)
	keys := []string{"bimodal:a", "bimodal:b", "bimodal:c", "bimodal:d"}
	var stock *redis.Client
	var guard *Client
	var events *eventLog
	clients := func() {
		stock = redis.NewClient(&redis.Options{Addr: srv.Addr})
		events = &eventLog{}
		guard = newTestClient(t, Config{Addrs: []string{srv.Addr}, OnEvent: events.onEvent})
	}
	clients()
	rows := [][]string{}
	var worst time.Duration
	for run := range runs {
		if fresh && run > 0 {
			clients()
		}
		sw, stopStock := startWriters("go-redis", stock, keys, 20)
		gw, stopGuard := startWriters("redisguard", guard, keys, 20)
		time.Sleep(300 * time.Millisecond)
		srv.Kill(t)
		killed := time.Now()
		time.Sleep(time.Second)
		ready := make(chan serverReady, 1)
		go func() { ready <- waitReady(srv.Addr, 10*time.Second) }()
		srv.Restart(t)
		r := <-ready
		back := r.accepting
		time.Sleep(1500 * time.Millisecond)
		stopStock()
		stopGuard()
		if fresh || run == runs-1 {
			_ = stock.Close()
			require.NoError(t, guard.Close())
		}

		gr, rg := sw.resumedAfter(killed.Add(100*time.Millisecond), back), gw.resumedAfter(killed.Add(100*time.Millisecond), back)
		// The bound counts from the server's first answer: a server that
		// accepts connections but answers late (its start slowed by the
		// tests beside it) delays every client alike.
		rgAnswered := gw.resumedAfter(killed.Add(100*time.Millisecond), r.answering)
		rows = append(rows, []string{strconv.Itoa(run + 1), fmtDur(r.answering.Sub(back)), fmtDur(gr), fmtDur(rg), fmtDur(rgAnswered)})
		require.GreaterOrEqual(t, gr, time.Duration(0), "run %d: go-redis never wrote again", run+1)
		require.GreaterOrEqual(t, rg, time.Duration(0), "run %d: redisguard never wrote again", run+1)
		worst = max(worst, rgAnswered)
		if rgAnswered > 200*time.Millisecond {
			// Say why: the breaker's and the probes' events, and the last
			// errors before the first write that succeeded.
			evs, _ := events.all()
			for _, e := range evs {
				if e.Time.After(killed) {
					t.Logf("run %d: %s after the kill: %s %s %v %s", run+1, fmtDur(e.Time.Sub(killed)), e.Kind, e.Decision, e.Duration, e.Err)
				}
			}
			kinds := map[string]int{}
			gw.mu.Lock()
			for _, e := range gw.errs {
				if e.at.After(back) && e.at.Before(back.Add(rg)) {
					kinds[e.err.Error()]++
				}
			}
			gw.mu.Unlock()
			t.Logf("run %d: errors between accepting and the first write: %v", run+1, kinds)
		}
		assert.LessOrEqual(t, rgAnswered, pick(200*time.Millisecond, 700*time.Millisecond), "run %d: redisguard came back too late after the server first answered", run+1)
		assert.LessOrEqual(t, rg, gr+pick(50*time.Millisecond, 300*time.Millisecond), "run %d: redisguard came back later than go-redis alone", run+1)
	}
	table(t, fmt.Sprintf("standalone server killed and restarted 1s later, %d runs, 20 writers each: first write after it accepts connections, and redisguard's after it first answers", runs),
		[]string{"run", "server answered", "go-redis", "redisguard", "redisguard after answer"}, rows...)
	t.Logf("redisguard's slowest run after the server's first answer: %v", worst.Round(time.Millisecond))
}

// serverReady is when a restarted server first accepted a TCP connection,
// and when it first answered PING with PONG.
type serverReady struct {
	accepting, answering time.Time
}

// waitReady polls addr every millisecond, for at most limit, until it
// accepts a connection and then until it answers PING on one.
func waitReady(addr string, limit time.Duration) serverReady {
	var r serverReady
	end := time.Now().Add(limit)
	for ; time.Now().Before(end); time.Sleep(time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, 50*time.Millisecond)
		if err != nil {
			continue
		}
		if r.accepting.IsZero() {
			r.accepting = time.Now()
		}
		pong := answersPing(c)
		_ = c.Close()
		if pong {
			r.answering = time.Now()
			return r
		}
	}
	now := time.Now()
	if r.accepting.IsZero() {
		r.accepting = now
	}
	r.answering = now
	return r
}

// answersPing sends PING on c and reports whether +PONG came back within
// 50ms; a LOADING error or no answer yet is false.
func answersPing(c net.Conn) bool {
	if c.SetDeadline(time.Now().Add(50*time.Millisecond)) != nil {
		return false
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, err := io.ReadFull(c, buf)
	return err == nil && string(buf[:n]) == "+PONG\r\n"
}

// A cluster master without a replica hangs for three seconds and resumes.
// The probe waiting on it is answered the moment it resumes.
func TestScenarioPausedClusterMasterRecovers(t *testing.T) {
	alone(t) // it compares recovery timings with go-redis's
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, NodeTimeout: 15 * time.Second})
	sick := cl.Masters[0]
	keys := []string{cl.KeyOn(t, sick, "recover:a"), cl.KeyOn(t, sick, "recover:b")}
	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: recoveryReadTimeout})
	t.Cleanup(func() { _ = stock.Close() })
	guard := newTestClient(t, Config{Addrs: cl.Addrs(), ReadTimeout: recoveryReadTimeout})
	sw, stopStock := startWrites("go-redis", stock, keys)
	gw, stopGuard := startWrites("redisguard", guard, keys)

	time.Sleep(500 * time.Millisecond)
	before := commandCalls(t, []*redistest.Server{sick}, "ping")
	connsBefore := sick.Info(t, "stats")["total_connections_received"]
	sick.Pause(t)
	time.Sleep(3 * time.Second)
	sick.Resume(t)
	resumed := time.Now()
	time.Sleep(2 * time.Second)
	stopStock()
	stopGuard()

	checkRecovery(t, "cluster master paused 3s: first write to its slots after the resume",
		sw, gw, resumed, resumed, pick(500*time.Millisecond, 1500*time.Millisecond))
	conns, _ := strconv.Atoi(sick.Info(t, "stats")["total_connections_received"])
	was, _ := strconv.Atoi(connsBefore)
	t.Logf("paused master: %d connections accepted, %d PINGs during and after the pause",
		conns-was, commandCalls(t, []*redistest.Server{sick}, "ping")-before)
	// Both clients' reconnections count too; probes alone are a few a second.
	assert.LessOrEqual(t, conns-was, 60, "the paused master was hammered with connections")
}

// Sentinel: the master hangs until the sentinels promote its replica.
// redisguard's breaker is per address: the new master's is closed, and the
// sentinels, asked while the old master's breaker is open, name it.
func TestScenarioSentinelPromotionRecovers(t *testing.T) {
	alone(t)
	g := redistest.StartSentinel(t)
	stock := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: g.MasterName, SentinelAddrs: g.Addrs(), ReadTimeout: recoveryReadTimeout,
	})
	t.Cleanup(func() { _ = stock.Close() })
	guard := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs(), ReadTimeout: recoveryReadTimeout})
	keys := []string{"recover:a", "recover:b"}
	sw, stopStock := startWrites("go-redis", stock, keys)
	gw, stopGuard := startWrites("redisguard", guard, keys)

	time.Sleep(500 * time.Millisecond)
	old := g.Master.Addr
	paused := time.Now()
	g.Master.Pause(t)
	named := waitNewMaster(t, g.Sentinels, old)
	time.Sleep(2 * time.Second)
	stopStock()
	stopGuard()

	t.Logf("sentinels named a new master %v after the pause", named.Sub(paused).Round(time.Millisecond))
	checkRecovery(t, "sentinel master paused until promotion: first write after the sentinels name the new master",
		sw, gw, named, named, pick(500*time.Millisecond, 1500*time.Millisecond))
	assert.Zero(t, gw.errsAfter(named.Add(time.Second), func(err error) bool {
		t.Logf("redisguard write failed %v after the promotion: %v", time.Since(named).Round(time.Millisecond), err)
		return true
	}), "redisguard writes failed a second after the promotion")
	// Each address has its own breaker: the old master's opened, the new
	// master's never did.
	states := map[string]NodeStats{}
	for _, n := range guard.Stats().Nodes {
		states[n.Addr] = n
	}
	t.Logf("nodes: %+v", guard.Stats().Nodes)
	assert.Positive(t, states[old].Opens, "the paused master's breaker never opened")
	assert.Equal(t, "closed", states[g.Replica.Addr].State, "the new master's breaker")
	assert.Zero(t, states[g.Replica.Addr].Opens, "the new master inherited an open breaker")
}

// Sentinel: the master and the sentinel the clients listen to (the only one
// they are configured with) die together, so no +switch-master reaches them.
func TestScenarioSentinelListenedSentinelDies(t *testing.T) {
	alone(t)
	g := redistest.StartSentinel(t)
	listened := g.Sentinels[0]
	stock := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: g.MasterName, SentinelAddrs: []string{listened.Addr}, ReadTimeout: recoveryReadTimeout,
	})
	t.Cleanup(func() { _ = stock.Close() })
	guard := newTestClient(t, Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: []string{listened.Addr}, ReadTimeout: recoveryReadTimeout})
	keys := []string{"recover:a", "recover:b"}
	sw, stopStock := startWrites("go-redis", stock, keys)
	gw, stopGuard := startWrites("redisguard", guard, keys)

	time.Sleep(time.Second)
	old := g.Master.Addr
	g.Master.Kill(t)
	listened.Kill(t)
	promoted := waitNewMaster(t, g.Sentinels[1:], old)
	time.Sleep(3 * time.Second)
	stopStock()
	stopGuard()

	checkRecovery(t, "master and listened sentinel killed: first write after the surviving sentinels promote the replica",
		sw, gw, promoted, promoted, pick(2*time.Second, 3*time.Second))
	readonly := func(err error) bool { return redis.IsReadOnlyError(err) }
	assert.Zero(t, gw.errsAfter(promoted, readonly), "redisguard writes answered READONLY after the promotion")
}

// waitNewMaster polls the sentinels until one names a master other than old,
// and returns when.
func waitNewMaster(t *testing.T, sentinels []*redistest.Server, old string) time.Time {
	t.Helper()
	var at time.Time
	redistest.WaitFor(t, 30*time.Second, "a sentinel to name a new master", func() error {
		for _, s := range sentinels {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			addr, err := s.Admin().Do(ctx, "sentinel", "get-master-addr-by-name", "mymaster").StringSlice()
			cancel()
			if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] != old {
				at = time.Now()
				return nil
			}
		}
		return errors.New("still the old master")
	})
	return at
}
