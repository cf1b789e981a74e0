package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ctx returns a context bounded well above any healthy command's latency.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

// refused reports whether nothing listens on addr any more. It dials raw so
// that the admin client's pool never sees a refused dial.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	return true
}

func pid(t *testing.T, s *Server) string {
	t.Helper()
	return s.Info(t, "server")["process_id"]
}

// recordingTB captures Skip and Fatal so that Binary's failure paths can be
// checked without failing this test. Like the real ones, both end the
// calling goroutine.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestBinary(t *testing.T) {
	installed, lookErr := exec.LookPath("redis-server")
	for _, tc := range []struct {
		name              string
		server, require   string
		path              string // PATH override; empty keeps PATH
		wantPath          string
		wantSkip, wantErr bool
		needsInstalled    bool // the case finds the real binary
	}{
		{name: "explicit path", server: installed, wantPath: installed, needsInstalled: true},
		{name: "found on PATH", wantPath: installed, needsInstalled: true},
		{name: "missing skips", server: "/nonexistent/redis-server", wantSkip: true},
		{name: "missing fails when required", server: "/nonexistent/redis-server", require: "1", wantErr: true},
		{name: "only 1 means required", server: "/nonexistent/redis-server", require: "true", wantSkip: true},
		{name: "not on PATH skips", path: t.TempDir(), wantSkip: true},
		{name: "not on PATH fails when required", path: t.TempDir(), require: "1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needsInstalled && lookErr != nil {
				Binary(t) // skips, or fails under REDISGUARD_REQUIRE_SERVER=1
			}
			t.Setenv(EnvServer, tc.server)
			t.Setenv(EnvRequireServer, tc.require)
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			rec := &recordingTB{TB: t}
			var got string
			done := make(chan struct{})
			go func() {
				defer close(done)
				got = Binary(rec)
			}()
			<-done
			if got != tc.wantPath || (rec.skipped != "") != tc.wantSkip || (rec.fatal != "") != tc.wantErr {
				t.Fatalf("Binary = %q, skip %q, fatal %q; want path %q, skip %v, fatal %v",
					got, rec.skipped, rec.fatal, tc.wantPath, tc.wantSkip, tc.wantErr)
			}
			if msg := rec.skipped + rec.fatal; msg != "" && !strings.Contains(msg, EnvServer) {
				t.Errorf("message %q does not say how to point at a binary (%s)", msg, EnvServer)
			}
		})
	}
}

func TestStandaloneLifecycle(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	a := s.Admin()
	if err := a.Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.Info(t, "server")["tcp_port"]; got != strconv.Itoa(s.Port) || s.Addr != "127.0.0.1:"+got {
		t.Fatalf("tcp_port %s, want %d at %s", got, s.Port, s.Addr)
	}
	firstPID := pid(t, s)

	s.Pause(t)
	if !s.Paused() {
		t.Fatal("Paused() = false after Pause")
	}
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := a.Ping(short).Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("PING to a paused server: %v, want a timeout", err)
	}

	s.Resume(t)
	if err := a.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	s.Pause(t) // Kill must work on a stopped process too.
	s.Kill(t)
	if s.Running() || s.Paused() || !refused(s.Addr) {
		t.Fatalf("after Kill: running %v, paused %v, refused %v", s.Running(), s.Paused(), refused(s.Addr))
	}

	s.Restart(t)
	if got := pid(t, s); got == firstPID {
		t.Fatalf("process_id %s unchanged by Restart", got)
	}
	if err := a.Get(ctx(t), "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: %v, want redis.Nil (persistence is off)", err)
	}
	if err := a.Set(ctx(t), "k", "v2", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}

	s.Stop(t)
	s.Stop(t) // idempotent
	if s.Running() || !refused(s.Addr) {
		t.Fatal("still serving after Stop")
	}
	s.Restart(t) // after a clean stop as well
	if err := a.Ping(ctx(t)).Err(); err != nil {
		t.Fatalf("PING after Stop and Restart: %v", err)
	}
	s.Pause(t) // left paused: cleanup has to resume and stop it
}

// TestServerExitingByItself covers a server that goes away without the
// harness's help (SHUTDOWN, a crash): it stops counting as running and can be
// restarted.
func TestServerExitingByItself(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	_ = s.Admin().Shutdown(ctx(t)).Err() // the connection drops: no reliable reply
	WaitFor(t, ReadyTimeout, "server to exit", func() error {
		if s.Running() {
			return errors.New("still running")
		}
		return nil
	})
	s.Restart(t)
	if err := s.Admin().Ping(ctx(t)).Err(); err != nil || !s.Running() {
		t.Fatalf("after Restart: PING %v, running %v", err, s.Running())
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	netErr, ok := errors.AsType[net.Error](err)
	return ok && netErr.Timeout()
}

func TestCleanupStopsEverything(t *testing.T) {
	t.Parallel()
	Binary(t) // so that a missing binary does not pass this test vacuously
	var servers []*Server
	t.Run("owner", func(t *testing.T) {
		running := StartServer(t)
		paused := StartServer(t)
		paused.Pause(t)
		servers = []*Server{running, paused}
	})
	for _, s := range servers {
		if s.Running() || !refused(s.Addr) {
			t.Errorf("%s still running after its test ended", s.Addr)
		}
		if err := s.Admin().Ping(context.Background()).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Errorf("admin client of %s after cleanup: %v, want redis.ErrClosed", s.Addr, err)
		}
	}
}

func TestStartServerArgs(t *testing.T) {
	t.Parallel()
	s := StartServer(t, "--maxmemory", "1mb", "--save", "900 1")
	for param, want := range map[string]string{"maxmemory": "1048576", "save": "900 1", "appendonly": "no"} {
		got, err := s.Admin().ConfigGet(ctx(t), param).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got[param], want)
		}
	}
}

func TestReplica(t *testing.T) {
	t.Parallel()
	primary := StartServer(t)
	replica := StartReplica(t, primary, "--replica-read-only", "yes")
	info := replica.Info(t, "replication")
	if info["role"] != "slave" || info["master_port"] != strconv.Itoa(primary.Port) || info["master_link_status"] != "up" {
		t.Fatalf("replica INFO replication: %v", info)
	}
	if err := primary.Admin().Set(ctx(t), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, ReadyTimeout, "k to replicate", func() error {
		got, err := replica.Admin().Get(ctx(t), "k").Result()
		if err == nil && got != "v" {
			err = fmt.Errorf("got %q", got)
		}
		return err
	})
	if err := replica.Admin().Set(ctx(t), "x", "y", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("write to replica: %v, want READONLY", err)
	}

	replica.Kill(t)
	replica.Restart(t)
	replica.WaitLinkUp(t)
	if got, err := replica.Admin().Get(ctx(t), "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after replica restart: %q, %v", got, err)
	}
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	g := StartSentinel(t)
	if n := len(g.Addrs()); n != 3 {
		t.Fatalf("%d sentinels, want 3", n)
	}
	if got := g.CurrentMaster(t); got != g.Master.Addr {
		t.Fatalf("CurrentMaster = %s, want %s", got, g.Master.Addr)
	}

	g.Failover(t)
	g.WaitMaster(t, g.Replica.Addr)
	if got := g.CurrentMaster(t); got != g.Replica.Addr {
		t.Fatalf("CurrentMaster after failover = %s, want %s", got, g.Replica.Addr)
	}
	// Sentinels switch their answer once the replica has accepted
	// REPLICAOF NO ONE, so it must already say so itself. (Not awaited: the
	// old master is demoted only when sentinels next poll its INFO, every
	// 10s.)
	if role := g.Replica.Info(t, "replication")["role"]; role != "master" {
		t.Fatalf("promoted replica reports role %s", role)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterOptions{ReplicasPerMaster: 1})
	if len(c.Masters) != 3 || len(c.Replicas) != 3 || len(c.Nodes()) != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d masters, %d replicas, %d nodes, %d addrs; want 3, 3, 6, 6",
			len(c.Masters), len(c.Replicas), len(c.Nodes()), len(c.Addrs()))
	}
	if got := c.Masters[0].Info(t, "cluster")["cluster_enabled"]; got != "1" {
		t.Fatalf("cluster_enabled:%s", got)
	}

	t.Run("layout", func(t *testing.T) {
		ids := map[string]bool{}
		for i, m := range c.Masters {
			first := i * SlotCount / len(c.Masters)
			if got := c.MasterForSlot(t, first); got != m {
				t.Errorf("slot %d owned by %v, want %v", first, got, m)
			}
			if got := c.Replicas[i].Info(t, "replication")["master_port"]; got != strconv.Itoa(m.Port) {
				t.Errorf("replica %d follows port %s, want %d", i, got, m.Port)
			}
		}
		for _, n := range c.Nodes() {
			id := c.NodeID(t, n)
			if my, err := n.Admin().ClusterMyID(ctx(t)).Result(); err != nil || my != id || ids[id] {
				t.Errorf("%v: NodeID %q, CLUSTER MYID %q (%v), duplicate %v", n, id, my, err, ids[id])
			}
			ids[id] = true
		}
	})

	t.Run("slot", func(t *testing.T) {
		for _, key := range []string{
			"", "a", "foo", "somekey", "user:1000", "{user1000}.following", "foo{bar}{zap}",
			"foo{{bar}}zap", "foo{}{bar}", "{}", "a{b", "a}b{c}", "\xff\x00binary", strings.Repeat("x", 300),
		} {
			want, err := c.Masters[0].Admin().ClusterKeySlot(ctx(t), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := Slot(key); got != int(want) {
				t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
			}
		}
	})

	t.Run("KeyOn", func(t *testing.T) {
		for _, m := range c.Masters {
			key := c.KeyOn(t, m, "key:")
			if !strings.HasPrefix(key, "key:") || c.MasterForSlot(t, Slot(key)) != m {
				t.Fatalf("KeyOn(%v) = %q (slot %d)", m, key, Slot(key))
			}
			// The owner accepts it without a MOVED redirect.
			if err := m.Admin().Set(ctx(t), key, "v", 0).Err(); err != nil {
				t.Fatalf("SET %s on %v: %v", key, m, err)
			}
		}
	})

	t.Run("slot migration", func(t *testing.T) {
		from, to := c.Masters[0], c.Masters[1]
		key := c.KeyOn(t, from, "migrating:")
		if err := from.Admin().Set(ctx(t), key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		m := c.BeginSlotMigration(t, Slot(key), from, to)
		if n := m.MoveKeys(t, 1); n != 1 {
			t.Fatalf("MoveKeys moved %d keys, want 1", n)
		}
		if addr, ok := redis.IsAskError(from.Admin().Get(ctx(t), key).Err()); !ok || addr != to.Addr {
			t.Fatalf("GET %s on the source after its key moved: want ASK to %v", key, to)
		}
		if n := m.MoveKeys(t, 1); n != 0 {
			t.Fatalf("MoveKeys moved %d keys from an emptied slot", n)
		}
		m.Finish(t)
		c.WaitHealthy(t) // the replicas agree too
		if got := c.MasterForSlot(t, Slot(key)); got != to {
			t.Fatalf("slot %d owned by %v after the migration, want %v", Slot(key), got, to)
		}
		if v, err := to.Admin().Get(ctx(t), key).Result(); err != nil || v != "v" {
			t.Fatalf("GET %s on the new owner: %q, %v", key, v, err)
		}
		c.MigrateSlot(t, Slot(key), to, from, 10)
		c.WaitHealthy(t)
		if got := c.MasterForSlot(t, Slot(key)); got != from {
			t.Fatalf("slot %d owned by %v after migrating it back, want %v", Slot(key), got, from)
		}
	})

	t.Run("restart keeps node ID", func(t *testing.T) {
		r := c.Replicas[1]
		r.Kill(t)
		r.Restart(t)
		if my, err := r.Admin().ClusterMyID(ctx(t)).Result(); err != nil || my != c.NodeID(t, r) {
			t.Fatalf("CLUSTER MYID after restart = %q, %v; want %q", my, err, c.NodeID(t, r))
		}
		c.WaitHealthy(t)
	})

	t.Run("paused master fails over", func(t *testing.T) {
		old, heir := c.Masters[0], c.Replicas[0]
		old.Pause(t)
		WaitFor(t, ReadyTimeout, "replica to be promoted", func() error {
			if role := heir.Info(t, "replication")["role"]; role != "master" {
				return fmt.Errorf("role %s", role)
			}
			return nil
		})
		c.WaitHealthy(t)
		if got := c.MasterForSlot(t, 0); got != heir {
			t.Fatalf("slot 0 owned by %v after failover, want %v", got, heir)
		}

		old.Resume(t)
		c.WaitHealthy(t) // includes: old master rejoined as a replica with its link up
		if info := old.Info(t, "replication"); info["role"] != "slave" || info["master_port"] != strconv.Itoa(heir.Port) {
			t.Fatalf("resumed old master: role %s, master_port %s", info["role"], info["master_port"])
		}
	})
}
