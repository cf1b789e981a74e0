package redisguard

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A least-privilege application user on the data nodes: what each mode and
// feature does with it, on real servers. Replication and the sentinels keep
// the default user. The users are the ones docs/acl.md gives
// (TestACLDocumentsTheTestedUsers keeps the two in step).

const appPassword = "apppw"

var (
	// appRules is the application profile of Redis's ACL guide: the data
	// commands, PING, nothing dangerous. It is docs/acl.md's user for
	// Standalone and for the data nodes of Sentinel mode.
	appRules = []string{"~*", "&*", "+@read", "+@write", "+ping", "-@dangerous"}
	// clusterRules is docs/acl.md's user for Cluster mode: what go-redis's
	// cluster client needs (the slot map, ASK redirects, READONLY and
	// COMMAND for replica reads), and the two questions of redisguard's
	// own (Check's CLUSTER INFO, a redirect cycle's CLUSTER NODES).
	clusterRules = append(slices.Clone(appRules),
		"+cluster|slots", "+asking", "+readonly", "+command", "+cluster|info", "+cluster|nodes")
)

// setUser creates user, or replaces its rules, on every server: password
// appPassword, then rules.
func setUser(t *testing.T, user string, rules []string, servers ...*redistest.Server) {
	t.Helper()
	args := []any{"acl", "setuser", user, "reset", "on", ">" + appPassword}
	for _, r := range rules {
		args = append(args, r)
	}
	for _, s := range servers {
		require.NoError(t, s.Admin().Do(testCtx(t, 5*time.Second), args...).Err(), "ACL SETUSER on %s", s.Addr)
	}
}

// without returns rules with the given ones left out.
func without(rules []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool { return slices.Contains(drop, r) })
}

// rejected is how many times servers refused cmd (INFO commandstats,
// "cluster|nodes" for a subcommand), whoever sent it.
func rejected(t *testing.T, cmd string, servers ...*redistest.Server) int {
	t.Helper()
	return commandStatField(t, servers, cmd, "rejected_calls")
}

// aclDenials sums the count of the ACL LOG entries that name object.
func aclDenials(t *testing.T, object string, servers ...*redistest.Server) int64 {
	t.Helper()
	var n int64
	for _, s := range servers {
		entries, err := s.Admin().ACLLog(testCtx(t, 5*time.Second), 100).Result()
		require.NoError(t, err)
		for _, e := range entries {
			if e.Object == object {
				n += e.Count
			}
		}
	}
	return n
}

// readFor sends GETs of keys through c for d, and returns how many it sent
// and how many failed.
func readFor(c redis.UniversalClient, keys []string, d time.Duration) (sent, failed int) {
	for end := time.Now().Add(d); time.Now().Before(end); sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := c.Get(ctx, keys[sent%len(keys)]).Err(); err != nil && !errors.Is(err, redis.Nil) {
			failed++
		}
		cancel()
		time.Sleep(5 * time.Millisecond)
	}
	return sent, failed
}

// writeKeys sets every key through c.
func writeKeys(t *testing.T, c redis.UniversalClient, keys []string) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	for _, k := range keys {
		require.NoError(t, c.Set(ctx, k, "v", 0).Err())
	}
}

// waitReplicated waits until master's replicas have its writes so far.
func waitReplicated(t *testing.T, master *redistest.Server) {
	t.Helper()
	n, err := master.Admin().Do(testCtx(t, 5*time.Second), "wait", 1, 2000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the replica did not acknowledge the writes")
}

// assertResumedAsSoon checks that redisguard's first write after the
// fault came no later than go-redis's plus 200ms. Both are timed from the
// fault, killed; a write that completes within 100ms of it was sent before.
// A client that never wrote again is taken to have written at end, when
// the writes stopped.
func assertResumedAsSoon(t *testing.T, what string, stock, guard *writeLog, killed, end time.Time) {
	t.Helper()
	from := killed.Add(100 * time.Millisecond)
	gr, rg := stock.resumedAfter(from, killed), guard.resumedAfter(from, killed)
	grText := fmtDur(gr)
	if gr < 0 {
		gr = end.Sub(killed)
		grText = "none by the end, " + fmtDur(gr)
	}
	table(t, what, []string{"client", "first write after"},
		[]string{stock.name, grText}, []string{guard.name, fmtDur(rg)})
	require.GreaterOrEqual(t, rg, time.Duration(0), "redisguard never wrote again")
	assert.LessOrEqual(t, rg, gr+200*time.Millisecond, "redisguard wrote again later than go-redis alone")
}

// setDownAfter sets the sentinels' down-after-milliseconds for the master.
func setDownAfter(t *testing.T, g *redistest.Sentinel, d time.Duration) {
	t.Helper()
	for _, s := range g.Sentinels {
		require.NoError(t, s.Admin().Do(testCtx(t, 5*time.Second), "sentinel", "set", g.MasterName, "down-after-milliseconds", d.Milliseconds()).Err())
	}
}

// The application user of Redis's ACL guide on the data nodes of a
// Sentinel group: redisguard confirms a new master with HELLO rather than
// ROLE, tells reads from its own table rather than COMMAND, and says once
// what it cannot know.
func TestLeastPrivilegeUserInSentinelMode(t *testing.T) {
	alone(t)
	g := redistest.StartSentinel(t)
	setUser(t, "app", appRules, g.Master, g.Replica)
	master, replica := g.Master, g.Replica
	keys := []string{"acl:a", "acl:b", "acl:c", "acl:d"}
	cfg := func(l *eventLog) Config {
		return Config{Mode: ModeSentinel, MasterName: g.MasterName, Addrs: g.Addrs(), Username: "app", Password: appPassword,
			ReadTimeout: recoveryReadTimeout, Logger: l.logger()}
	}

	t.Run("replica_preferred reads go to the replica, and COMMAND is asked once", func(t *testing.T) {
		var l eventLog
		c := cfg(&l)
		c.ReadFrom = ReadFromReplicaPreferred
		guard := newTestClient(t, c)
		writeKeys(t, guard, keys)
		waitReplicated(t, master)
		onReplica, onMaster := commandCalls(t, []*redistest.Server{replica}, "get"), commandCalls(t, []*redistest.Server{master}, "get")
		// Past the second after which a failed COMMAND would be asked again.
		sent, failed := readFor(guard, keys, 1500*time.Millisecond)
		assert.Zero(t, failed)
		assert.Equal(t, sent, commandCalls(t, []*redistest.Server{replica}, "get")-onReplica, "GETs the replica served")
		assert.Equal(t, onMaster, commandCalls(t, []*redistest.Server{master}, "get"), "the master served GETs")
		assert.Equal(t, 1, rejected(t, "command", master, replica), "COMMAND was refused more than once")
		assert.Equal(t, int64(1), aclDenials(t, "command", master, replica))
		assert.Equal(t, map[string]int{"COMMAND": 1}, refusals(&l), "the refusal is said once")
	})

	t.Run("without INFO, no read goes to a replica, and INFO is asked once", func(t *testing.T) {
		var l eventLog
		c := cfg(&l)
		c.ReadFrom, c.MaxReplicaStaleness = ReadFromReplicaPreferred, 5*time.Second
		guard := newTestClient(t, c)
		onReplica := commandCalls(t, []*redistest.Server{replica}, "get")
		infoBefore := rejected(t, "info", replica)
		// Past the second after which a replica's lag is polled again.
		sent, failed := readFor(guard, keys, 2500*time.Millisecond)
		assert.Zero(t, failed, "the master serves the reads")
		assert.Positive(t, sent)
		assert.Equal(t, onReplica, commandCalls(t, []*redistest.Server{replica}, "get"), "a replica of unknown lag served reads")
		assert.Equal(t, 1, rejected(t, "info", replica)-infoBefore, "INFO was refused more than once")
		assert.Equal(t, 1, refusals(&l)["INFO"], "the refusal is said once")
	})

	t.Run("master_preferred reads go to the replica while the master hangs", func(t *testing.T) {
		setDownAfter(t, g, 10*time.Second) // no failover during the hang
		defer setDownAfter(t, g, time.Second)
		var l eventLog
		c := cfg(&l)
		c.ReadFrom = ReadFromMasterPreferred
		guard := newTestClient(t, c)
		readFor(guard, keys, 100*time.Millisecond) // learn the master
		onReplica := commandCalls(t, []*redistest.Server{replica}, "get")
		master.Pause(t)
		paused := time.Now()
		sentHang, _ := readFor(guard, keys, 600*time.Millisecond) // the breaker opens within HungNodeAfter
		sent, failed := readFor(guard, keys, 1500*time.Millisecond)
		master.Resume(t)
		t.Logf("master paused %v; %d reads during its first 600ms, then %d reads, %d failed",
			time.Since(paused).Round(time.Millisecond), sentHang, sent, failed)
		assert.Zero(t, failed, "a read of the hung master failed once its breaker was open")
		assert.GreaterOrEqual(t, commandCalls(t, []*redistest.Server{replica}, "get")-onReplica, sent, "GETs the replica served")
		assert.Equal(t, 1, refusals(&l)["COMMAND"], "the refusal is said once")
		replica.WaitLinkUp(t)
	})

	t.Run("writes follow a failover as soon as with go-redis alone", func(t *testing.T) {
		var l eventLog
		guard := newTestClient(t, cfg(&l))
		stock := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.MasterName, SentinelAddrs: g.Addrs(),
			Username: "app", Password: appPassword, ReadTimeout: recoveryReadTimeout})
		t.Cleanup(func() { _ = stock.Close() })
		sw, stopStock := startWrites("go-redis", stock, keys)
		gw, stopGuard := startWrites("redisguard", guard, keys)
		time.Sleep(500 * time.Millisecond)
		old := g.CurrentMaster(t)
		killed := time.Now()
		master.Kill(t)
		named := waitNewMaster(t, g.Sentinels, old)
		time.Sleep(2 * time.Second)
		stopStock()
		stopGuard()
		t.Logf("sentinels named the new master %v after the kill", named.Sub(killed).Round(time.Millisecond))
		assertResumedAsSoon(t, "sentinel master killed, app user: first write after the kill", sw, gw, killed, time.Now())
		assert.Zero(t, rejected(t, "role", replica), "ROLE was sent as the application's user")
		assert.Empty(t, refusals(&l), "a refusal was logged for plain writes")
	})
}

// The user docs/acl.md gives for Cluster mode, and users denied one of its
// rules: what needs the rule works, and what loses it says so once.
func TestLeastPrivilegeUserInClusterMode(t *testing.T) {
	sideBySide(t)
	const nodeTimeout = 4 * time.Second // the hang below stays shorter
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, ReplicasPerMaster: 1, NodeTimeout: nodeTimeout})
	nodes := cl.Nodes()
	setUser(t, "app", clusterRules, nodes...)
	master, replica := cl.Masters[0], cl.Replicas[0]
	keys := []string{cl.KeyOn(t, master, "acl:a"), cl.KeyOn(t, master, "acl:b"), cl.KeyOn(t, master, "acl:c")}
	cfg := func(user string, l *eventLog) Config {
		return Config{Mode: ModeCluster, Addrs: cl.Addrs(), Username: user, Password: appPassword,
			ReadTimeout: recoveryReadTimeout, Logger: l.logger()}
	}
	{
		admin := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		writeKeys(t, admin, keys)
		_ = admin.Close()
		waitReplicated(t, master)
	}

	t.Run("replica_preferred reads go to the replica", func(t *testing.T) {
		var l eventLog
		c := cfg("app", &l)
		c.ReadFrom = ReadFromReplicaPreferred
		guard := newTestClient(t, c)
		readFor(guard, keys, 100*time.Millisecond) // the slot map, the command table, the connections
		onReplica, onMasters := commandCalls(t, []*redistest.Server{replica}, "get"), commandCalls(t, cl.Masters, "get")
		sent, failed := readFor(guard, keys, time.Second)
		assert.Zero(t, failed)
		assert.Equal(t, sent, commandCalls(t, []*redistest.Server{replica}, "get")-onReplica, "GETs the replica served")
		assert.Equal(t, onMasters, commandCalls(t, cl.Masters, "get"), "a master served GETs")
		assert.Empty(t, refusals(&l))
	})

	t.Run("without COMMAND, go-redis's read routing gives up once", func(t *testing.T) {
		setUser(t, "app-nocommand", without(clusterRules, "+command"), nodes...)
		var l eventLog
		c := cfg("app-nocommand", &l)
		c.ReadFrom = ReadFromReplicaPreferred
		guard := newTestClient(t, c)
		before := rejected(t, "command", nodes...)
		onMasters := commandCalls(t, cl.Masters, "get")
		sent, failed := readFor(guard, keys, 1500*time.Millisecond)
		assert.Zero(t, failed, "the masters serve the reads")
		assert.Equal(t, sent, commandCalls(t, cl.Masters, "get")-onMasters, "GETs the masters served")
		// go-redis alone asks up to three nodes for every command.
		assert.Equal(t, 1, rejected(t, "command", nodes...)-before, "COMMAND was sent again after its refusal")
		assert.Equal(t, map[string]int{"COMMAND": 1}, refusals(&l), "the refusal is said once")
	})

	t.Run("without READONLY, master_preferred fails no connection", func(t *testing.T) {
		setUser(t, "app-noreadonly", without(clusterRules, "+readonly"), nodes...)
		var l eventLog
		c := cfg("app-noreadonly", &l)
		c.ReadFrom, c.MinIdleConns = ReadFromMasterPreferred, 2
		guard := newTestClient(t, c)
		before := rejected(t, "readonly", nodes...)
		writeKeys(t, guard, keys)
		sent, failed := readFor(guard, keys, 300*time.Millisecond)
		assert.Zero(t, failed)
		assert.Positive(t, sent)
		// Connections dialled before the first refusal was heard may
		// each have been refused; none after.
		first := rejected(t, "readonly", nodes...) - before
		assert.LessOrEqual(t, first, 2*len(nodes))
		time.Sleep(200 * time.Millisecond) // MinIdleConns dials in the background
		writeKeys(t, guard, keys)
		assert.Equal(t, first, rejected(t, "readonly", nodes...)-before, "READONLY was sent again after its refusal")
		assert.Equal(t, map[string]int{"READONLY": 1}, refusals(&l), "the refusal is said once")
	})

	t.Run("what go-redis needs fails every command with the permission it lacks", func(t *testing.T) {
		for _, tc := range []struct {
			rule     string
			readFrom ReadFrom
		}{
			{"+cluster|slots", ReadFromMaster},
			{"+readonly", ReadFromReplicaPreferred}, // go-redis sends it on every connection
		} {
			user := "app-no" + strings.NewReplacer("+", "", "|", "-").Replace(tc.rule)
			setUser(t, user, without(clusterRules, tc.rule), nodes...)
			var l eventLog
			c := cfg(user, &l)
			c.ReadFrom = tc.readFrom
			guard := newTestClient(t, c)
			for _, k := range keys {
				err := guard.Set(testCtx(t, 5*time.Second), k, "v", 0).Err()
				require.Error(t, err, "without %s", tc.rule)
				assert.Contains(t, err.Error(), "NOPERM", "without %s", tc.rule)
				assert.Contains(t, err.Error(), strings.TrimPrefix(tc.rule, "+"), "without %s", tc.rule)
			}
		}
	})

	t.Run("without CLUSTER INFO, Check names the missing permission", func(t *testing.T) {
		setUser(t, "app-noinfo", without(clusterRules, "+cluster|info"), nodes...)
		var l eventLog
		guard := newTestClient(t, cfg("app-noinfo", &l))
		rep := guard.Check(testCtx(t, 5*time.Second), CheckOptions{WriteKey: keys[0]})
		t.Logf("report: %s", rep.String())
		assert.False(t, rep.Healthy)
		require.NotNil(t, rep.ClusterState)
		assert.Contains(t, rep.ClusterState.Error, "NOPERM")
		assert.Contains(t, rep.ClusterState.Error, "cluster|info")

		full := newTestClient(t, cfg("app", &l))
		rep = full.Check(testCtx(t, 5*time.Second), CheckOptions{WriteKey: keys[0]})
		assert.True(t, rep.Healthy, "the documented user: %s", rep.String())
	})

	t.Run("without CLUSTER NODES, redirect cycles are decided without views, said once", func(t *testing.T) {
		setUser(t, "app-nonodes", without(clusterRules, "+cluster|nodes"), nodes...)
		var l eventLog
		guard := newTestClient(t, cfg("app-nonodes", &l))
		readFor(guard, keys, 50*time.Millisecond) // the node clients
		before := rejected(t, "cluster|nodes", nodes...)
		slot := redistest.Slot(keys[0])
		assert.Empty(t, guard.div.gatherViews(testCtx(t, 5*time.Second), slot, master.Addr))
		first := rejected(t, "cluster|nodes", nodes...) - before
		assert.Positive(t, first)
		assert.LessOrEqual(t, first, maxViews)
		assert.Empty(t, guard.div.gatherViews(testCtx(t, 5*time.Second), slot, master.Addr))
		assert.Equal(t, first, rejected(t, "cluster|nodes", nodes...)-before, "CLUSTER NODES was sent again after its refusal")
		assert.Equal(t, map[string]int{"CLUSTER NODES": 1}, refusals(&l))
	})

	t.Run("ModeAuto finds the cluster without INFO", func(t *testing.T) {
		var l eventLog
		before := rejected(t, "info", master)
		guard := newTestClient(t, Config{Addrs: []string{master.Addr}, Username: "app", Password: appPassword, Logger: l.logger()})
		assert.Equal(t, ModeCluster, guard.Mode())
		assert.Equal(t, before, rejected(t, "info", master), "INFO was sent as the application's user")
	})

	t.Run("master_preferred reads go to the replica while the master hangs", func(t *testing.T) {
		var l eventLog
		c := cfg("app", &l)
		c.ReadFrom = ReadFromMasterPreferred
		guard := newTestClient(t, c)
		readFor(guard, keys, 100*time.Millisecond)
		onReplica := commandCalls(t, []*redistest.Server{replica}, "get")
		master.Pause(t)
		sentHang, _ := readFor(guard, keys, 600*time.Millisecond)
		sent, failed := readFor(guard, keys, 1200*time.Millisecond)
		master.Resume(t)
		t.Logf("%d reads during the first 600ms of the hang, then %d reads, %d failed", sentHang, sent, failed)
		assert.Zero(t, failed, "a read of the hung master failed once its breaker was open")
		assert.GreaterOrEqual(t, commandCalls(t, []*redistest.Server{replica}, "get")-onReplica, sent, "GETs the replica served")
		assert.Empty(t, refusals(&l))
		cl.WaitHealthy(t)
	})

	t.Run("writes follow a failover as soon as with go-redis alone", func(t *testing.T) {
		var l eventLog
		guard := newTestClient(t, cfg("app", &l))
		stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Username: "app", Password: appPassword,
			ReadTimeout: recoveryReadTimeout})
		t.Cleanup(func() { _ = stock.Close() })
		sw, stopStock := startWrites("go-redis", stock, keys)
		gw, stopGuard := startWrites("redisguard", guard, keys)
		time.Sleep(500 * time.Millisecond)
		killed := time.Now()
		master.Kill(t)
		redistest.WaitFor(t, 30*time.Second, "the replica to take over", func() error {
			if r := replica.Info(t, "replication")["role"]; r != "master" {
				return errors.New("role " + r)
			}
			return nil
		})
		promoted := time.Now()
		time.Sleep(3 * time.Second)
		stopStock()
		stopGuard()
		t.Logf("the replica took over %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
		assertResumedAsSoon(t, "cluster master killed, documented user: first write after the kill", sw, gw, killed, time.Now())
		assert.Empty(t, refusals(&l))
	})
}

// The application user of Redis's ACL guide on a standalone server.
func TestLeastPrivilegeUserInStandaloneMode(t *testing.T) {
	srv := redistest.StartServer(t)
	setUser(t, "app", appRules, srv)

	t.Run("ModeAuto runs Standalone without INFO", func(t *testing.T) {
		before := rejected(t, "info", srv)
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, Username: "app", Password: appPassword})
		assert.Equal(t, ModeStandalone, c.Mode())
		assert.True(t, c.Healthy(testCtx(t, 5*time.Second), "acl:health"))
		assert.Equal(t, before, rejected(t, "info", srv))
	})

	t.Run("a cancelled blocking call ends without CLIENT ID, and UNBLOCK's refusal is said once", func(t *testing.T) {
		var l eventLog
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, Username: "app", Password: appPassword, Logger: l.logger()})
		ctx := testCtx(t, 30*time.Second)
		for i := range 3 {
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.BLPop(cctx, 0, "acl:queue:"+strconv.Itoa(i)).Err() }()
			waitBlocked(t, srv, 1)
			cancel()
			select {
			case err := <-done:
				require.ErrorIs(t, err, context.Canceled)
			case <-time.After(10 * time.Second):
				t.Fatal("the cancelled call never returned")
			}
			waitBlocked(t, srv, 0)
		}
		assert.Zero(t, rejected(t, "client|id", srv)+commandCalls(t, []*redistest.Server{srv}, "client|id"), "CLIENT ID was sent")
		assert.Equal(t, 1, rejected(t, "client|unblock", srv), "CLIENT UNBLOCK was sent again after its refusal")
		assert.Equal(t, map[string]int{"CLIENT UNBLOCK": 1}, refusals(&l))
	})

	t.Run("ClientName fails every connection with the permission it lacks", func(t *testing.T) {
		// go-redis names the connection in HELLO and again with CLIENT
		// SETNAME; docs/acl.md says to grant +client|setname with it.
		c := newTestClient(t, Config{Addrs: []string{srv.Addr}, Username: "app", Password: appPassword, ClientName: "svc"})
		err := c.Ping(testCtx(t, 5*time.Second)).Err()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "client|setname")
	})
}

// docs/acl.md gives, as ACL SETUSER lines, exactly the users these tests
// create.
func TestACLDocumentsTheTestedUsers(t *testing.T) {
	doc, err := os.ReadFile("docs/acl.md")
	require.NoError(t, err)
	for name, rules := range map[string][]string{"standalone and sentinel": appRules, "cluster": clusterRules} {
		line := "ACL SETUSER app on >" + appPassword + " " + strings.Join(rules, " ")
		assert.Contains(t, string(doc), line, "the %s user", name)
	}
}
