package redisproc

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/faultproxy"
)

// bin returns the redis-server binary or skips the test, unless
// REDISGUARD_REQUIRE_SERVER=1 (as CI sets), which makes it fail. This is
// redistest.Binary's rule; redistest cannot be imported here, since it wraps
// this package.
func bin(t *testing.T) string {
	t.Helper()
	path, err := Binary()
	if err != nil {
		if os.Getenv("REDISGUARD_REQUIRE_SERVER") == "1" {
			t.Fatalf("redis-server required: %v", err)
		}
		t.Skipf("redis-server not usable: %v", err)
	}
	return path
}

// testEnv closes every server the test starts, even those it forgets.
func testEnv(t *testing.T) Env {
	return Env{
		Bin: bin(t),
		OnStart: func(s *Server) {
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			})
		},
	}
}

func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	return true
}

func TestReservePortHandsOutEachPortOnce(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := reservePort()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { releasePort(p) })
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		if p < portMin || p >= portMax || p+busOffset >= 32768 {
			t.Fatalf("port %d (bus %d) outside [%d, %d) or in the ephemeral range", p, p+busOffset, portMin, portMax)
		}
		seen[p] = true
	}
}

// The zero Env works on its own: it finds the binary, makes a directory and
// removes it on Close. Every verb reports misuse as an error.
func TestZeroEnvLifecycle(t *testing.T) {
	bin(t)
	s, err := Env{}.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Admin().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info("server"); err != nil || info["tcp_port"] == "" {
		t.Fatalf("INFO server: %v, %v", info, err)
	}

	if err := s.Pause(); err != nil || !s.Paused() || s.Reachable() || !s.Running() {
		t.Fatalf("Pause: %v; paused %v, reachable %v, running %v", err, s.Paused(), s.Reachable(), s.Running())
	}
	if err := s.Resume(); err != nil || s.Paused() || !s.Reachable() {
		t.Fatalf("Resume: %v; paused %v, reachable %v", err, s.Paused(), s.Reachable())
	}
	if err := s.Kill(); err != nil || s.Running() || !refused(s.Addr) {
		t.Fatalf("Kill: %v; running %v", err, s.Running())
	}
	for verb, f := range map[string]func() error{"pause": s.Pause, "resume": s.Resume, "kill": s.Kill} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "not running") {
			t.Errorf("%s on a killed server: %v, want a 'not running' error", verb, err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop on a stopped server: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}

	// Close resumes a paused server, stops it, and removes the directory
	// it made.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s.Running() || !refused(s.Addr) {
		t.Fatal("still serving after Close")
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s after Close: %v, want it removed", s.Dir, err)
	}
	if err := s.Admin().Ping(ctx).Err(); !errors.Is(err, redis.ErrClosed) {
		t.Fatalf("admin client after Close: %v, want redis.ErrClosed", err)
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

// A directory from Env.TempDir belongs to the caller and stays.
func TestCallerDirectoryIsKept(t *testing.T) {
	env := testEnv(t)
	dir := t.TempDir()
	env.TempDir = func() (string, error) { return dir, nil }
	s, err := env.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("caller's directory after Close: %v", err)
	}
}

// A start that fails leaves nothing running and says why.
func TestFailedStartCleansUp(t *testing.T) {
	env := testEnv(t)
	var started []*Server
	env.OnStart = func(s *Server) { started = append(started, s) }
	_, err := env.StartServer("--no-such-option", "x")
	if err == nil {
		t.Fatal("StartServer with a bad option succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Errorf("error does not quote redis's complaint: %v", err)
	}
	_, err = env.StartCluster(ClusterOptions{Masters: 2, Args: []string{"--no-such-option", "x"}})
	if err == nil {
		t.Fatal("StartCluster with a bad option succeeded")
	}
	if len(started) < 2 {
		t.Fatalf("OnStart saw %d servers, want every attempt", len(started))
	}
	for _, s := range started {
		if s.Running() {
			t.Errorf("%s left running after a failed start", s.Addr)
		}
		if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left its directory behind: %v", s.Addr, err)
		}
	}
	if _, err := (Env{Bin: "/nonexistent/redis-server"}).StartServer(); err == nil {
		t.Fatal("StartServer with a missing binary succeeded")
	}
}

// TestPortTakenIsDetected covers the race StartServer retries: another
// process binding the port after it was picked.
func TestPortTakenIsDetected(t *testing.T) {
	owner, err := testEnv(t).StartServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	loser := &Server{Addr: owner.Addr, Port: owner.Port, Dir: dir, bin: bin(t), args: baseArgs(owner.Port, dir)}
	t.Cleanup(func() {
		// Not Close: that would release owner's port reservation.
		if err := loser.halt(); err != nil {
			t.Error(err)
		}
		_ = loser.Admin().Close()
	})
	if err := loser.launch(); !errors.Is(err, errPortTaken) {
		t.Fatalf("launch on a taken port: %v, want errPortTaken\n%s", err, logTail(dir))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := owner.Admin().Ping(ctx).Err(); err != nil {
		t.Fatalf("owner disturbed: %v", err)
	}
}

// A small cluster through the error-returning API: the demo's path.
func TestClusterErrors(t *testing.T) {
	c, err := testEnv(t).StartCluster(ClusterOptions{Masters: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Addrs()) != 3 || c.Node(c.Masters[1].Addr) != c.Masters[1] || c.Node("127.0.0.1:1") != nil {
		t.Fatalf("Addrs %v, Node lookups wrong", c.Addrs())
	}
	if got := c.ClientAddrs(); !slices.Equal(got, c.Addrs()) {
		t.Fatalf("ClientAddrs %v without Announce, want the nodes' own %v", got, c.Addrs())
	}
	if _, err := c.MasterForSlot(SlotCount); err == nil {
		t.Error("MasterForSlot(SlotCount) succeeded")
	}
	if _, err := c.NodeID(&Server{Addr: "127.0.0.1:1"}); err == nil {
		t.Error("NodeID of a stranger succeeded")
	}
	key, err := c.KeyOn(c.Masters[2], "k:")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.MasterForSlot(Slot(key)); err != nil || m != c.Masters[2] {
		t.Fatalf("MasterForSlot(%q) = %v, %v", key, m, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n.Running() {
			t.Errorf("%s running after Close", n.Addr)
		}
	}
	if _, err := c.SlotOwners(); err == nil {
		t.Error("SlotOwners with every node stopped succeeded")
	}
}

// With Announce, each node tells clients to reach it at the port Announce
// returned, here a proxy's in front of it: CLUSTER SLOTS, MOVED and the
// harness's own lookups name the proxies, a cluster client seeded with one
// proxy reaches every node through them, and the admin clients still talk
// to the nodes themselves.
func TestClusterAnnounce(t *testing.T) {
	proxies := map[string]*faultproxy.Proxy{} // by the proxy's address
	opt := ClusterOptions{Masters: 2, Announce: func(port int) int {
		p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[p.Addr()] = p
		_, to, _ := net.SplitHostPort(p.Addr())
		n, _ := strconv.Atoi(to)
		return n
	}}
	c, err := testEnv(t).StartCluster(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, n := range c.Nodes() {
		addr := c.ClientAddr(n)
		p := proxies[addr]
		if p == nil || p.Target() != n.Addr || c.Node(addr) != n || c.Node(n.Addr) != n {
			t.Fatalf("%s announces %s: want a proxy to it, found by Node", n.Addr, addr)
		}
	}
	if got, want := c.ClientAddrs(), []string{c.ClientAddr(c.Masters[0]), c.ClientAddr(c.Masters[1])}; !slices.Equal(got, want) {
		t.Fatalf("ClientAddrs = %v, want %v", got, want)
	}
	slots, err := c.Masters[0].Admin().ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range slots {
		for _, node := range r.Nodes {
			if proxies[node.Addr] == nil {
				t.Fatalf("CLUSTER SLOTS names %s for %d-%d, not a proxy", node.Addr, r.Start, r.End)
			}
		}
	}
	key, err := c.KeyOn(c.Masters[1], "k:")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.MasterForSlot(Slot(key)); err != nil || m != c.Masters[1] {
		t.Fatalf("MasterForSlot(%q) = %v, %v", key, m, err)
	}
	err = c.Masters[0].Admin().Get(ctx, key).Err()
	if addr, ok := redis.IsMovedError(err); !ok || addr != c.ClientAddr(c.Masters[1]) {
		t.Fatalf("GET %s on the other master: %v, want MOVED to %s's proxy", key, err, c.Masters[1].Addr)
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{c.ClientAddr(c.Masters[0])}, MaxRedirects: -1})
	defer cc.Close()
	for _, n := range c.Masters {
		k, err := c.KeyOn(n, "through:")
		if err != nil {
			t.Fatal(err)
		}
		if err := cc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatalf("SET %s through the proxies: %v", k, err)
		}
		if got, err := n.Admin().Get(ctx, k).Result(); err != nil || got != "v" {
			t.Fatalf("GET %s on %s itself: %q, %v", k, n.Addr, got, err)
		}
		if s := proxies[c.ClientAddr(n)].Stats(); s.Accepted == 0 {
			t.Fatalf("the client never went through %s's proxy", n.Addr)
		}
	}
}
