package redisguard

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Bounds for the real-server health tests. oneRoundTrip is what "judged in
// one round trip" may take on a loaded 2-core machine under -race: a loopback
// round trip is well under a millisecond. It cannot by itself tell a retried
// check from a single one (go-redis's first retry backoff is 10-30ms), so
// every answering server is also asked how many SETs it saw.
const (
	healthTimeout = 500 * time.Millisecond // dial, read and write timeout of the clients under test
	oneRoundTrip  = 50 * time.Millisecond
	hungBound     = 1500 * time.Millisecond // a hung server must be judged within this
	healthKey     = "redisguard:health:test"
)

func healthConfig(addr string) Config {
	return Config{Addrs: []string{addr}, DialTimeout: healthTimeout, ReadTimeout: healthTimeout, WriteTimeout: healthTimeout}
}

// fillUntilOOM fills a noeviction server past its maxmemory, so that it
// refuses every write. Filling with SET until one fails is not enough: Redis
// counts client buffers as used memory, and the failing SET's own query
// buffer is often what tipped it over, so small writes fit again once that
// buffer is freed; and a value bigger than the headroom never lands, because
// its query buffer alone exceeds the limit. Lifting the limit for one big
// write leaves the dataset itself far over the limit, beyond what any client
// buffer could account for.
func fillUntilOOM(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	admin := srv.Admin()
	limit, err := admin.ConfigGet(ctx, "maxmemory").Result()
	require.NoError(t, err)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "0").Err())
	require.NoError(t, admin.Set(ctx, "fill:big", strings.Repeat("x", 512<<10), 0).Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", limit["maxmemory"]).Err())
	err = admin.Set(ctx, "fill:small", "x", 0).Err()
	require.ErrorContains(t, err, "OOM", "%s must refuse even a small write", srv.Addr)
}

// commandStat returns the attempts the server counted for cmd since the last
// CONFIG RESETSTAT: executed, failed and rejected (READONLY and OOM are
// rejected before the command runs).
func commandStat(t *testing.T, srv *redistest.Server, cmd string) int {
	t.Helper()
	line := srv.Info(t, "commandstats")["cmdstat_"+cmd]
	total := 0
	for field := range strings.SplitSeq(line, ",") {
		k, v, _ := strings.Cut(field, "=")
		if k == "calls" || k == "failed_calls" || k == "rejected_calls" {
			n, err := strconv.Atoi(v)
			require.NoError(t, err, "parsing %q", line)
			total += n
		}
	}
	return total
}

func resetStats(t *testing.T, srv *redistest.Server) {
	t.Helper()
	require.NoError(t, srv.Admin().ConfigResetStat(testCtx(t, 5*time.Second)).Err())
}

// Acceptance 1: three servers answer PING, but only the healthy primary takes
// writes; a hung server fails both checks within the timeouts.
func TestHealthyJudgesTheOperation(t *testing.T) {
	primary := redistest.StartServer(t)
	full := redistest.StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	fillUntilOOM(t, full)
	// The replica follows a primary of its own, which nobody writes to, so
	// its command stats count only what the check sends it.
	replica := redistest.StartReplica(t, redistest.StartServer(t))
	paused := redistest.StartServer(t)

	tests := []struct {
		name      string
		srv       *redistest.Server
		pause     bool // SIGSTOP after the client has connected
		wantPing  bool // Healthy(ctx, "")
		wantWrite bool // Healthy(ctx, key)
		wantErr   string
	}{
		{name: "primary", srv: primary, wantPing: true, wantWrite: true},
		{name: "full noeviction server", srv: full, wantPing: true, wantErr: "OOM"},
		{name: "read-only replica", srv: replica, wantPing: true, wantErr: "READONLY"},
		// Its silence opens its breaker (HungNodeAfter) before the check's
		// read times out, unless the machine is too slow to tell in time.
		{name: "paused primary", srv: paused, pause: true, wantErr: "node unavailable|timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, healthConfig(tt.srv.Addr))
			ctx := testCtx(t, 30*time.Second)
			// An established connection, as in a running service: the
			// timings below are the check's, not a dial's.
			require.NoError(t, c.Ping(ctx).Err())
			if tt.pause {
				tt.srv.Pause(t)
			} else {
				resetStats(t, tt.srv)
			}

			start := time.Now()
			gotPing := c.Healthy(ctx, "")
			pingTook := time.Since(start)
			start = time.Now()
			gotWrite := c.Healthy(ctx, healthKey)
			writeTook := time.Since(start)
			t.Logf("Healthy(\"\") = %v in %v; Healthy(key) = %v in %v", gotPing, pingTook, gotWrite, writeTook)

			assert.Equal(t, tt.wantPing, gotPing, "Healthy(ctx, \"\")")
			assert.Equal(t, tt.wantWrite, gotWrite, "Healthy(ctx, key)")
			if tt.pause {
				assert.LessOrEqual(t, pingTook, hungBound)
				assert.LessOrEqual(t, writeTook, hungBound)
				// One read timeout, not two: a retried PING would wait
				// out the timeout twice, plus a backoff.
				assert.Less(t, pingTook, 2*healthTimeout)
				assert.Less(t, writeTook, 2*healthTimeout)
			} else {
				assert.LessOrEqual(t, pingTook, oneRoundTrip)
				assert.LessOrEqual(t, writeTook, oneRoundTrip)
				assert.Equal(t, 1, commandStat(t, tt.srv, "set"), "SET attempts the server saw")
			}

			rep := c.Check(ctx, CheckOptions{WriteKey: healthKey})
			assert.Equal(t, tt.wantWrite, rep.Healthy)
			if tt.wantErr != "" {
				failed := rep.Write
				if !rep.Ping.OK {
					failed = rep.Ping
					assert.True(t, rep.Write.Skipped, "a failed ping must skip the write")
				}
				assert.Regexp(t, tt.wantErr, failed.Error)
			}
		})
	}

	// The probe key is there, and expires on its own.
	ttl, err := primary.Admin().PTTL(testCtx(t, 5*time.Second), healthKey).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0))
	assert.LessOrEqual(t, ttl, DefaultHealthWriteTTL)
}

// Go-redis retries READONLY after a backoff sleep; the check must not. A
// replica counts the attempts, so this fails if the SET is ever sent twice.
func TestCheckSendsOneWriteToReadOnlyReplica(t *testing.T) {
	replica := redistest.StartReplica(t, redistest.StartServer(t))
	c := newTestClient(t, Config{Addrs: []string{replica.Addr}})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	resetStats(t, replica)

	const checks = 20
	var worst time.Duration
	for range checks {
		rep := c.Check(ctx, CheckOptions{WriteKey: healthKey})
		require.False(t, rep.Healthy)
		require.True(t, rep.Ping.OK)
		require.Contains(t, rep.Write.Error, "READONLY")
		worst = max(worst, rep.Write.Latency)
	}
	t.Logf("worst write step latency over %d checks: %v", checks, worst)
	assert.Equal(t, checks, commandStat(t, replica, "set"), "one SET per check")
	assert.LessOrEqual(t, worst, oneRoundTrip)
}

// Acceptance 2: nothing to ask the network; the check must not try. The
// server is paused, so any attempt would cost the 3s default read timeout.
func TestHealthyReturnsAtOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Pause(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	var nilCtx context.Context

	tests := []struct {
		name    string
		ctx     context.Context
		close   bool
		wantErr string
	}{
		{name: "closed client", ctx: context.Background(), close: true, wantErr: ErrClosed.Error()},
		{name: "cancelled context", ctx: cancelled, wantErr: context.Canceled.Error()},
		{name: "expired deadline", ctx: expired, wantErr: context.DeadlineExceeded.Error()},
		{name: "nil context", ctx: nilCtx, wantErr: "nil context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
			if tt.close {
				require.NoError(t, c.Close())
			}
			start := time.Now()
			assert.False(t, c.Healthy(tt.ctx, healthKey))
			rep := c.Check(tt.ctx, CheckOptions{WriteKey: healthKey})
			took := time.Since(start)
			assert.Less(t, took, oneRoundTrip, "two checks took %v", took)
			assert.False(t, rep.Healthy)
			assert.Contains(t, rep.Ping.Error, tt.wantErr)
			assert.True(t, rep.Write.Skipped)
		})
	}

	t.Run("context ending mid-check", func(t *testing.T) {
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		rep := c.Check(ctx, CheckOptions{})
		took := time.Since(start)
		assert.False(t, rep.Healthy)
		assert.Equal(t, context.DeadlineExceeded.Error(), rep.Ping.Error)
		assert.Less(t, took, hungBound, "the check outlived its context by far: %v", took)
	})
}

// Error texts must never carry the password, right or wrong.
func TestCheckReportHasNoPassword(t *testing.T) {
	const secret = "s3cret-Pa55word-for-health"
	srv := redistest.StartServer(t)
	// Set at runtime: the harness waits for an unauthenticated PING at start,
	// so it cannot start a server with --requirepass. The admin client's
	// connection stays authenticated.
	require.NoError(t, srv.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", secret).Err())

	tests := []struct {
		name     string
		password string
		healthy  bool
		wantErr  string
	}{
		{name: "right password", password: secret, healthy: true},
		{name: "wrong password", password: secret + "-but-wrong", wantErr: "WRONGPASS"},
		{name: "password that is a prefix of the right one", password: secret[:8], wantErr: "WRONGPASS"},
		{name: "no password", wantErr: "NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := healthConfig(srv.Addr)
			cfg.Password = tt.password
			c := newTestClient(t, cfg)
			rep := c.Check(testCtx(t, 10*time.Second), CheckOptions{WriteKey: healthKey})
			assert.Equal(t, tt.healthy, rep.Healthy)
			if tt.wantErr != "" {
				assert.Contains(t, rep.Ping.Error, tt.wantErr)
			}
			body, err := json.Marshal(rep)
			require.NoError(t, err)
			for _, text := range []string{string(body), rep.String()} {
				assert.NotContains(t, text, secret)
				if tt.password != "" {
					assert.NotContains(t, text, tt.password)
				}
			}
		})
	}
}

// The report must survive a trip through JSON, which is how handlers and
// logs carry it.
func TestCheckReportJSON(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, healthConfig(srv.Addr))
	rep := c.Check(testCtx(t, 10*time.Second), CheckOptions{WriteKey: healthKey})
	require.True(t, rep.Healthy, "%v", rep)

	body, err := json.Marshal(rep)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(body, &raw))
	for _, field := range []string{"healthy", "mode", "checked_at", "duration_ns", "ping", "write", "nodes"} {
		assert.Contains(t, raw, field)
	}
	assert.NotContains(t, raw, "cluster_state", "standalone reports have no cluster steps")

	var back Report
	require.NoError(t, json.Unmarshal(body, &back))
	assert.Equal(t, rep.Healthy, back.Healthy)
	assert.Equal(t, "standalone", back.Mode)
	assert.Equal(t, srv.Addr, back.Write.Node)
	assert.Positive(t, back.Write.Latency)
	require.Len(t, back.Nodes, 1)
	assert.Equal(t, "closed", back.Nodes[0].State)
	assert.Contains(t, rep.String(), "healthy (standalone, "+srv.Addr+"): ping ")
}

// A Cluster check writes on every master, a key of that master's slots,
// and is healthy while any master serves: a master that does not, the write
// key's own one too, makes it degraded (unhealthy only when every shard is
// required).
func TestCheckCluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{
		Mode:                 ModeCluster,
		Addrs:                cl.Addrs(),
		DialTimeout:          healthTimeout,
		ReadTimeout:          healthTimeout,
		WriteTimeout:         healthTimeout,
		NodeFailureThreshold: 1,
	})
	ctx := testCtx(t, 60*time.Second)

	t.Run("all slots served", func(t *testing.T) {
		assert.True(t, c.Healthy(ctx, ""))
		for i, m := range cl.Masters {
			key := cl.KeyOn(t, m, "redisguard:health:cluster:")
			rep := c.Check(ctx, CheckOptions{WriteKey: key})
			assert.True(t, rep.Healthy, "master %d: %v", i, rep)
			assert.False(t, rep.Degraded, "master %d: %v", i, rep)
			require.NotNil(t, rep.Write)
			assert.Equal(t, m.Addr, rep.Write.Node, "the write goes to the key's master")
			assert.Equal(t, m.Addr, rep.ClusterState.Node, "CLUSTER INFO is read from the node that answered")
			assert.True(t, rep.ClusterState.OK)
			assert.True(t, rep.Breakers.OK)
			assert.Empty(t, rep.MastersDown)
			require.Len(t, rep.Masters, 3, "every master is checked")
			for _, r := range rep.Masters {
				assert.True(t, r.OK, "%+v", r)
				owner := cl.MasterForSlot(t, redistest.Slot(r.Key))
				assert.Equal(t, owner.Addr, r.Node, "%s is written on the master of its slot", r.Key)
				if r.Node == m.Addr {
					assert.Equal(t, key, r.Key, "the write key itself on its own master")
				} else {
					assert.True(t, strings.HasPrefix(r.Key, key+"{"), "%s derives from %s", r.Key, key)
				}
				ttl, err := owner.Admin().PTTL(ctx, r.Key).Result()
				require.NoError(t, err)
				assert.Greater(t, ttl, time.Duration(0), "%s was written, with an expiry", r.Key)
			}
		}
	})

	t.Run("one master paused with its breaker open", func(t *testing.T) {
		sick, well := cl.Masters[1], cl.Masters[0]
		sick.Pause(t)
		// The client's read timeout, not the caller's deadline, must end
		// the GET: only a node fault counts against the breaker.
		err := c.Get(ctx, cl.KeyOn(t, sick, "redisguard:health:open:")).Err()
		require.Error(t, err)
		require.Equal(t, "open", breakerState(c, sick.Addr), "the sick master's breaker")

		// The healthy master takes the write: the service can do its work,
		// degraded; the report says which master is out.
		wellKey := cl.KeyOn(t, well, "redisguard:health:cluster:")
		start := time.Now()
		rep := c.Check(ctx, CheckOptions{WriteKey: wellKey})
		took := time.Since(start)
		t.Logf("check with one master down took %v: %v", took, rep)
		assert.True(t, rep.Healthy, "%v", rep)
		assert.True(t, rep.Degraded, "%v", rep)
		assert.True(t, rep.Write.OK, "the write to a healthy master succeeds")
		assert.False(t, rep.Breakers.OK)
		assert.Contains(t, rep.Breakers.Error, sick.Addr)
		assert.Equal(t, []string{sick.Addr}, rep.MastersDown)
		assert.Contains(t, rep.String(), "degraded (cluster): 2 of 3 masters serve (ping, cluster_state, write; slowest ")
		assert.Contains(t, rep.String(), "; down "+sick.Addr+": ping: ")
		assert.LessOrEqual(t, took, hungBound)
		assert.True(t, c.Healthy(ctx, wellKey))

		// Every shard required: unhealthy.
		rep = c.Check(ctx, CheckOptions{WriteKey: wellKey, RequireAllShards: true})
		assert.False(t, rep.Healthy, "%v", rep)
		assert.False(t, rep.Degraded)

		// The write key on the sick master: the other masters serve, so
		// the check is degraded, at once, and says that its own master is
		// out.
		sickKey := cl.KeyOn(t, sick, "redisguard:health:cluster:")
		start = time.Now()
		rep = c.Check(ctx, CheckOptions{WriteKey: sickKey})
		assert.True(t, rep.Healthy, "%v", rep)
		assert.True(t, rep.Degraded, "%v", rep)
		assert.Contains(t, rep.Ping.Error, "node unavailable")
		assert.Equal(t, []string{sick.Addr}, rep.MastersDown)
		assert.LessOrEqual(t, time.Since(start), hungBound)
		assert.True(t, c.Healthy(ctx, sickKey), "Healthy follows the same rule")
		assert.False(t, c.Check(ctx, CheckOptions{WriteKey: sickKey, RequireAllShards: true}).Healthy)
	})

	t.Run("cluster_state fail seen without breakers", func(t *testing.T) {
		sick, well := cl.Masters[1], cl.Masters[0] // still paused
		require.True(t, sick.Paused())
		redistest.WaitFor(t, redistest.ReadyTimeout, "the cluster to mark its slots down", func() error {
			info, err := well.Admin().ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if state := infoField(info, "cluster_state"); state != "fail" {
				return fmt.Errorf("cluster_state:%s", state)
			}
			return nil
		})
		blind := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{well.Addr}, NodeFailureThreshold: -1})
		rep := blind.Check(ctx, CheckOptions{WriteKey: cl.KeyOn(t, well, "redisguard:health:cluster:")})
		assert.False(t, rep.Healthy, "%v", rep)
		assert.True(t, rep.Breakers.OK, "breakers are off")
		assert.Equal(t, "cluster_state:fail", rep.ClusterState.Error)
		assert.Contains(t, rep.Write.Error, "CLUSTERDOWN", "a cluster that is down refuses the write")
		assert.Len(t, rep.MastersDown, 3, "%v", rep)
	})
}

// A ModeAuto Client whose one seed did not answer at NewClient runs
// Standalone until the seed's first answer. A check that hears, on its own
// connection, that the seed is a cluster node reports as a Cluster check of
// the Client it became, not as a Standalone check whose write went
// elsewhere, and quotes no reply it did not get.
func TestCheckOfAClientThatLearnsItIsACluster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	seed, other := cl.Masters[0], cl.Masters[1]
	for _, protocol := range []int{3, 2} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			seed.Pause(t)
			c := newTestClient(t, Config{Addrs: []string{seed.Addr}, Protocol: protocol})
			seed.Resume(t)
			require.Equal(t, ModeStandalone, c.Mode(), "the seed did not answer at NewClient")
			key := cl.KeyOn(t, other, "redisguard:health:late:")
			rep := c.Check(testCtx(t, 20*time.Second), CheckOptions{WriteKey: key})
			t.Logf("%v", rep)
			assert.True(t, rep.Healthy, "%v", rep)
			assert.Equal(t, "cluster", rep.Mode)
			assert.Equal(t, other.Addr, rep.Write.Node, "the write key's master")
			assert.Len(t, rep.Masters, 3)
			assert.NotContains(t, rep.String(), `"redisguard:"`)
		})
	}
}

// Sentinel: the check goes to whichever server the sentinels call master.
func TestCheckSentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	c := newTestClient(t, Config{MasterName: s.MasterName, Addrs: s.Addrs(), ReadTimeout: healthTimeout})
	rep := c.Check(testCtx(t, 30*time.Second), CheckOptions{WriteKey: healthKey})
	assert.True(t, rep.Healthy, "%v", rep)
	assert.Equal(t, "sentinel", rep.Mode)
	assert.Equal(t, "sentinel-master:"+s.MasterName, rep.Write.Node)
	assert.Nil(t, rep.ClusterState)

	ttl, err := s.Master.Admin().PTTL(testCtx(t, 5*time.Second), healthKey).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0), "the write landed on the master")
}

func breakerState(c *Client, addr string) string {
	for _, n := range c.Stats().Nodes {
		if n.Addr == addr {
			return n.State
		}
	}
	return "unknown"
}

// The one-line summary is what the probe command prints and logs show.
func TestReportString(t *testing.T) {
	ok := &StepResult{OK: true, Node: "10.0.0.5:6379", Latency: 312 * time.Microsecond}
	tests := []struct {
		name string
		all  bool // RequireAllShards
		rep  Report
		want string
	}{
		{
			name: "healthy with write",
			rep:  Report{Mode: "standalone", Ping: ok, Write: ok},
			want: "healthy (standalone, 10.0.0.5:6379): ping 312µs, write 312µs",
		},
		{
			name: "failed write",
			rep:  Report{Mode: "standalone", Ping: ok, Write: &StepResult{Node: "10.0.0.5:6379", Error: "OOM command not allowed"}},
			want: "unhealthy (standalone, 10.0.0.5:6379): ping 312µs, write failed: OOM command not allowed",
		},
		{
			name: "cluster healthy",
			rep:  Report{Mode: "cluster", Ping: ok, ClusterState: ok, Write: ok, Breakers: &StepResult{OK: true}},
			want: "healthy (cluster, 10.0.0.5:6379): ping 312µs, cluster_state 312µs, write 312µs, no master breaker open",
		},
		{
			name: "cluster breaker open",
			rep: Report{Mode: "cluster", Ping: ok, ClusterState: ok,
				Breakers: &StepResult{Error: "breaker open for master 10.0.0.6:6379"}},
			want: "degraded (cluster, 10.0.0.5:6379): ping 312µs, cluster_state 312µs, breakers failed: breaker open for master 10.0.0.6:6379",
		},
		{
			name: "cluster breaker open, every shard required",
			all:  true,
			rep: Report{Mode: "cluster", Ping: ok, ClusterState: ok,
				Breakers: &StepResult{Error: "breaker open for master 10.0.0.6:6379"}},
			want: "unhealthy (cluster, 10.0.0.5:6379): ping 312µs, cluster_state 312µs, breakers failed: breaker open for master 10.0.0.6:6379",
		},
		{
			name: "slow node",
			rep:  Report{Mode: "cluster", Ping: ok, ClusterState: ok, Breakers: &StepResult{OK: true}, Slow: []string{"10.0.0.7:6379"}},
			want: "degraded (cluster, 10.0.0.5:6379): ping 312µs, cluster_state 312µs, no master breaker open; slow: 10.0.0.7:6379",
		},
		{
			name: "cluster, every master serves",
			rep: Report{Mode: "cluster", Ping: ok, ClusterState: ok, Write: ok, Breakers: &StepResult{OK: true},
				Masters: []*StepResult{
					{OK: true, Node: "10.0.0.5:6379", Latency: 312 * time.Microsecond},
					{OK: true, Node: "10.0.0.6:6379", Latency: 405 * time.Microsecond},
				}},
			want: "healthy (cluster): 2 of 2 masters serve (ping, cluster_state, write; slowest 405µs)",
		},
		{
			name: "cluster, one master down",
			rep: Report{Mode: "cluster", Ping: ok, ClusterState: ok, Write: ok,
				Breakers: &StepResult{Error: "breaker open for master 10.0.0.6:6379"},
				Masters: []*StepResult{
					{OK: true, Node: "10.0.0.5:6379", Latency: 312 * time.Microsecond},
					{Node: "10.0.0.6:6379", Error: "ping: redisguard: node unavailable (node 10.0.0.6:6379)"},
					{Node: "10.0.0.7:6379", Error: "cluster_state:fail"},
				},
				MastersDown: []string{"10.0.0.6:6379", "10.0.0.7:6379"}},
			want: "degraded (cluster): 1 of 3 masters serve (ping, cluster_state, write; slowest 312µs); " +
				"down 10.0.0.6:6379: ping: redisguard: node unavailable (node 10.0.0.6:6379); " +
				"down 10.0.0.7:6379: cluster_state:fail; breaker open for master 10.0.0.6:6379",
		},
		{
			name: "cluster, one master down, every shard required",
			all:  true,
			rep: Report{Mode: "cluster", Ping: ok, ClusterState: ok, Breakers: &StepResult{OK: true},
				Masters: []*StepResult{
					{OK: true, Node: "10.0.0.5:6379", Latency: 312 * time.Microsecond},
					{Node: "10.0.0.6:6379", Error: "cluster_state:fail"},
				},
				MastersDown: []string{"10.0.0.6:6379"}},
			want: "unhealthy (cluster): 1 of 2 masters serve (ping, cluster_state; slowest 312µs), and every one is required; down 10.0.0.6:6379: cluster_state:fail",
		},
		{
			name: "cluster, no master serves",
			rep: Report{Mode: "cluster", Ping: &StepResult{Error: "x"}, Breakers: &StepResult{OK: true},
				Masters:     []*StepResult{{Node: "10.0.0.5:6379", Error: "ping: redisguard: node failed: i/o timeout"}},
				MastersDown: []string{"10.0.0.5:6379"}},
			want: "unhealthy (cluster): 0 of 1 masters serve; down 10.0.0.5:6379: ping: redisguard: node failed: i/o timeout",
		},
		{
			name: "skipped steps are left out",
			rep:  Report{Mode: "standalone", Ping: &StepResult{Error: "redisguard: client is closed"}, Write: &StepResult{Skipped: true}},
			want: "unhealthy (standalone): ping failed: redisguard: client is closed",
		},
		{
			name: "no steps",
			rep:  Report{Mode: "standalone"},
			want: "unhealthy (standalone): nothing checked",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rep.judge(tt.all)
			assert.Equal(t, tt.want, tt.rep.String())
		})
	}
}
