package redisguard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// The fault schedule of the chaos soak (chaos_test.go). Faults run one at a
// time on the test goroutine, each followed by a wait for the cluster to
// heal, in rounds: every round is a fresh seeded permutation of all kinds.
// The schedule ends once the planned time is over and every kind has run at
// least once, so a short run still covers them all. Which shard a fault hits
// and how long it holds come from the same seed.

// faultGrace is how long after a fault has healed (and the cluster with it)
// a network error on its node still counts as the fault's: pooled
// connections that a fault broke are found broken only when next used.
const faultGrace = 3 * time.Second

// faultWindows records when each shard was under which fault.
type faultWindows struct {
	mu   sync.Mutex
	wins []faultWindow // guarded by mu
}

type faultWindow struct {
	shard      int
	kind       string    // a faultKinds entry, or crashKind
	start, end time.Time // end is zero while the fault lasts
}

// anyClusterShard stands for "some cluster node, the test cannot tell which":
// go-redis picks a subscription's node from its slot map when it
// (re)connects, and that map lags the cluster during failovers. A fault on
// any cluster shard then counts.
const anyClusterShard = -2

// crashKind marks a node that exited by itself: Redis's fault, not the
// schedule's.
const crashKind = "crash"

// lossyKinds may promote a replica that lacks the last writes (and pops).
var lossyKinds = []string{"pause-master", "takeover-failover", crashKind}

// open starts a window of kind on shard and returns its index for close.
func (f *faultWindows) open(shard int, kind string) int {
	return f.openAt(shard, kind, time.Now())
}

func (f *faultWindows) openAt(shard int, kind string, at time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wins = append(f.wins, faultWindow{shard: shard, kind: kind, start: at})
	return len(f.wins) - 1
}

func (f *faultWindows) close(i int) {
	f.closeAt(i, time.Now())
}

// closeAt ends window i at t, or now if that is later.
func (f *faultWindows) closeAt(i int, t time.Time) {
	if now := time.Now(); t.Before(now) {
		t = now
	}
	f.mu.Lock()
	f.wins[i].end = t
	f.mu.Unlock()
}

// active reports whether a fault of one of kinds on shard overlapped
// [from, to], counting faultGrace after its end. With no kinds, any fault
// but the quietKinds counts.
func (f *faultWindows) active(shard int, from, to time.Time, kinds ...string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.wins {
		other := w.shard != shard && (shard != anyClusterShard || w.shard == sideShard)
		kind := slices.Contains(kinds, w.kind) || len(kinds) == 0 && !slices.Contains(quietKinds, w.kind)
		if other || to.Before(w.start) || !kind {
			continue
		}
		if w.end.IsZero() || !from.After(w.end.Add(faultGrace)) {
			return true
		}
	}
	return false
}

var faultKinds = []string{"pause-master", "kill-replica", "client-kill", "graceful-failover", "takeover-failover", "blackhole", "long-budget", "slow-master", "reshard"}

type chaosSchedule struct {
	t     *testing.T
	cl    *redistest.Cluster
	proxy *faultproxy.Proxy
	w     *chaosWorld
	rng   *rand.Rand

	log     []string     // what ran, for the report
	open    []openWindow // windows of the fault that ran last, closed once it has healed
	crashes int          // nodes that exited by themselves
	lossy   map[int]bool // shards where a fault may lose acknowledged writes
	start   time.Time
	last    time.Time // when the last fault began

	// reshards counts the resharding steps that moved a slot, and asked
	// the ASKING commands the importing masters received meanwhile.
	reshards, asked int
}

// run injects faults until d has passed and every kind has run once.
func (s *chaosSchedule) run(d time.Duration) {
	s.lossy = map[int]bool{}
	s.start = time.Now()
	done := map[string]bool{}
	for {
		for _, i := range s.rng.Perm(len(faultKinds)) {
			if time.Since(s.start) >= d && len(done) == len(faultKinds) {
				return
			}
			kind := faultKinds[i]
			at := time.Since(s.start)
			s.last = time.Now()
			what := s.inject(kind)
			done[kind] = true
			what += s.settle(s.start.Add(at))
			s.healed()
			s.log = append(s.log, fmt.Sprintf("%s %6.1fs %-17s %s (healed after %.1fs)", s.start.Add(at).Format("15:04:05.0"), at.Seconds(), kind, what, (time.Since(s.start)-at).Seconds()))
		}
	}
}

// openWindow is a window of the fault that ran last: it ends once the
// cluster has healed, and not before notBefore.
type openWindow struct {
	win       int
	notBefore time.Time
}

// healing marks window win as the last fault's, ending once the cluster has
// healed from it (see healed), and not before notBefore: a failover or a
// replica's resync involves both of a shard's nodes until then.
func (s *chaosSchedule) healing(win int, notBefore time.Time) {
	s.open = append(s.open, openWindow{win: win, notBefore: notBefore})
}

// healed closes the windows of the fault that ran last.
func (s *chaosSchedule) healed() {
	for _, o := range s.open {
		s.w.faults.closeAt(o.win, o.notBefore)
	}
	s.open = s.open[:0]
}

// manualFailoverTimeout is Redis's CLUSTER_MF_TIMEOUT: in a graceful
// failover the old master pauses writes until it learns it was replaced, or
// for this long; writes it holds until then end in timeouts.
const manualFailoverTimeout = 5 * time.Second

// hold returns a fault's duration: between lo and lo+spread.
func (s *chaosSchedule) hold(lo, spread time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(spread)))
}

// inject runs one fault to its end and says what it did.
func (s *chaosSchedule) inject(kind string) string {
	t := s.t
	shard := s.rng.IntN(len(s.cl.Masters))
	switch kind {
	case "pause-master":
		m := s.nodeWithRole(shard, "master")
		if m == nil {
			return fmt.Sprintf("skipped: shard %d has no master", shard)
		}
		s.lossy[shard] = true // its replica may be promoted without the last writes
		hold := s.hold(1500*time.Millisecond, 2*time.Second)
		win := s.w.faults.open(shard, kind)
		defer s.healing(win, time.Time{})
		m.Pause(t)
		time.Sleep(hold)
		m.Resume(t)
		return fmt.Sprintf("shard %d master %s paused %.1fs", shard, m.Addr, hold.Seconds())
	case "kill-replica":
		r := s.nodeWithRole(shard, "slave")
		if r == nil {
			return fmt.Sprintf("skipped: shard %d has no replica", shard)
		}
		win := s.w.faults.open(shard, kind)
		defer s.healing(win, time.Time{})
		r.Kill(t)
		time.Sleep(s.hold(500*time.Millisecond, time.Second))
		r.Restart(t)
		return fmt.Sprintf("shard %d replica %s killed and restarted", shard, r.Addr)
	case "client-kill":
		m := s.nodeWithRole(shard, "master")
		if m == nil {
			return fmt.Sprintf("skipped: shard %d has no master", shard)
		}
		win := s.w.faults.open(shard, kind)
		defer s.healing(win, time.Time{})
		killed := 0
		for range 3 {
			killed += killClients(m, chaosName)
			time.Sleep(300 * time.Millisecond)
		}
		return fmt.Sprintf("shard %d master %s: 3 CLIENT KILL bursts, %d connections", shard, m.Addr, killed)
	case "graceful-failover", "takeover-failover":
		r := s.nodeWithRole(shard, "slave")
		if r == nil {
			return fmt.Sprintf("skipped: shard %d has no replica", shard)
		}
		args := []any{"cluster", "failover"}
		if kind == "takeover-failover" {
			args = append(args, "takeover")
			s.lossy[shard] = true // no handshake: the last writes may not have reached the replica
		}
		win := s.w.faults.open(shard, kind)
		var paused time.Time // until which the old master may hold writes
		if kind == "graceful-failover" {
			paused = time.Now().Add(manualFailoverTimeout)
		}
		defer s.healing(win, paused)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.Admin().Do(ctx, args...).Err(); err != nil {
			return fmt.Sprintf("shard %d replica %s: refused: %v", shard, r.Addr, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for role(r) != "master" {
			if time.Now().After(deadline) {
				return fmt.Sprintf("shard %d replica %s: not promoted within 10s", shard, r.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return fmt.Sprintf("shard %d replica %s promoted", shard, r.Addr)
	case "blackhole":
		hold := s.hold(1500*time.Millisecond, 1500*time.Millisecond)
		win := s.w.faults.open(sideShard, kind)
		defer s.healing(win, time.Time{})
		if err := s.proxy.SetMode(faultproxy.Blackhole); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold)
		if err := s.proxy.SetMode(faultproxy.Pass); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("standalone behind the proxy blackholed %.1fs", hold.Seconds())
	case "long-budget":
		return s.fillLongBudget(shard)
	case "reshard":
		return s.reshard()
	case "slow-master":
		m := s.nodeWithRole(shard, "master")
		if m == nil {
			return fmt.Sprintf("skipped: shard %d has no master", shard)
		}
		hold := s.hold(2*time.Second, 2*time.Second)
		win := s.w.faults.open(shard, kind)
		defer s.healing(win, time.Time{})
		stop := slowDown(t, m) // CLIENT PAUSE 45 ALL every 50ms: about ten times slower
		time.Sleep(hold)
		stop()
		return fmt.Sprintf("shard %d master %s slowed %.1fs", shard, m.Addr, hold.Seconds())
	}
	panic("unknown fault " + kind)
}

// fillLongBudget parks as many BLPOPs as the long budget holds, on a key
// nobody pushes to, so that the workload's own blocking calls and the
// subscriber's reconnects find no permit for a while.
func (s *chaosSchedule) fillLongBudget(shard int) string {
	n := s.w.c.cfg.MaxLongConnections
	hold := s.hold(1500*time.Millisecond, time.Second)
	key := s.cl.KeyOn(s.t, s.nodeWithRole(shard, "master"), "chaos:hog")
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel, t0, dl := opCtx()
			defer cancel()
			err := s.w.c.BLPop(ctx, hold, key).Err()
			s.w.record("hog", shard, t0, dl, err)
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d BLPOPs of %.1fs on %s (shard %d)", n, hold.Seconds(), key, shard)
}

// nodeWithRole returns shard's node that has role now, or nil.
func (s *chaosSchedule) nodeWithRole(shard int, want string) *redistest.Server {
	for _, n := range []*redistest.Server{s.cl.Masters[shard], s.cl.Replicas[shard]} {
		if role(n) == want {
			return n
		}
	}
	return nil
}

// settle waits until the cluster is healthy again (every node up, one view
// of the slots, replicas linked), so the next fault starts from a cluster
// that can take it. A node that exited by itself since the fault began at
// since (redis-server can crash in a failover) is restarted, reported, and
// its shard counted as faulted from since: that is Redis's doing, not the
// client's.
func (s *chaosSchedule) settle(since time.Time) string {
	var crashed string
	for i, n := range s.cl.Nodes() {
		if n.Running() {
			continue
		}
		crashed += s.restartCrashed(i, n, since)
	}
	s.cl.WaitHealthy(s.t)
	return crashed
}

// restartCrashed restarts the i-th node, which exited by itself since, and
// counts its shard as faulted from then on.
func (s *chaosSchedule) restartCrashed(i int, n *redistest.Server, since time.Time) string {
	shard := i % len(s.cl.Masters)
	win := s.w.faults.openAt(shard, crashKind, since)
	s.lossy[shard] = true
	why := crashReport(n)
	n.Restart(s.t)
	s.w.faults.close(win)
	s.crashes++
	return fmt.Sprintf("; %s exited by itself (%s) and was restarted", n.Addr, why)
}

// crashReport returns the lines of n's log that say why it died.
func crashReport(n *redistest.Server) string {
	body, err := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
	if err != nil {
		return "no log: " + err.Error()
	}
	var why []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.Contains(line, "crashed") || strings.Contains(line, "ASSERTION") || strings.Contains(line, "Guru") || strings.Contains(line, "signal") {
			why = append(why, strings.TrimSpace(line))
		}
	}
	if len(why) > 4 {
		why = why[:4]
	}
	return strings.Join(why, " | ")
}

// healAll undoes whatever a failed schedule may have left behind, and
// restarts a node that crashed after the last fault (since then).
func (s *chaosSchedule) healAll(since time.Time) {
	for i, n := range s.cl.Nodes() {
		if n.Paused() {
			n.Resume(s.t)
		}
		if !n.Running() {
			s.log = append(s.log, time.Now().Format("15:04:05.0")+" after the schedule: "+s.restartCrashed(i, n, since))
		}
	}
	_ = s.proxy.SetMode(faultproxy.Pass)
}

// killClients kills every connection on srv named name and returns how many.
func killClients(srv *redistest.Server, name string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	list, err := srv.Admin().ClientList(ctx).Result()
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if id, ok := strings.CutPrefix(f, "id="); ok {
				if srv.Admin().Do(ctx, "client", "kill", "id", id).Err() == nil {
					n++
				}
				break
			}
		}
	}
	return n
}
