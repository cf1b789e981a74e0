package redisguard

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Healthy-path benchmarks: the same server, the same workload, go-redis
// alone and redisguard side by side. `make bench` runs them; they skip
// without redis-server.

// benchTarget is one server set-up and the clients built for it: go-redis
// alone with redisguard's go-redis options (same timeouts, pool, and
// ContextTimeoutEnabled), so that the difference is redisguard's own work;
// go-redis with its defaults, which is what a user switching constructors
// had before; and redisguard.
type benchTarget struct {
	name     string
	stock    redis.UniversalClient // go-redis, same options as redisguard's, no hooks
	control  redis.UniversalClient // a second client like stock: the ratio test's control
	defaults redis.UniversalClient // go-redis, default options
	guarded  *Client
}

// sides returns the clients of a target in a fixed order.
func (t benchTarget) sides() []struct {
	name string
	c    redis.UniversalClient
} {
	return []struct {
		name string
		c    redis.UniversalClient
	}{{"go-redis", t.stock}, {"go-redis-defaults", t.defaults}, {"redisguard", t.guarded}}
}

func BenchmarkGet(b *testing.B) {
	for _, t := range benchTargets(b) {
		for _, s := range t.sides() {
			b.Run(t.name+"/"+s.name, func(b *testing.B) { parallelOp(b, s.c, getOp) })
		}
	}
}

func BenchmarkSet(b *testing.B) {
	for _, t := range benchTargets(b) {
		for _, s := range t.sides() {
			b.Run(t.name+"/"+s.name, func(b *testing.B) { parallelOp(b, s.c, setOp) })
		}
	}
}

func BenchmarkPipeline100(b *testing.B) {
	for _, t := range benchTargets(b) {
		for _, s := range t.sides() {
			b.Run(t.name+"/"+s.name, func(b *testing.B) { parallelOp(b, s.c, pipelineOp) })
		}
	}
}

func getOp(ctx context.Context, c redis.Cmdable) error { return c.Get(ctx, "bench:key").Err() }
func setOp(ctx context.Context, c redis.Cmdable) error {
	return c.Set(ctx, "bench:key", "value", 0).Err()
}
func pipelineOp(ctx context.Context, c redis.Cmdable) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 100 {
			p.Get(ctx, "bench:pipe:"+strconv.Itoa(i%10))
		}
		return nil
	})
	if err == redis.Nil {
		return nil
	}
	return err
}

func parallelOp(b *testing.B, c redis.UniversalClient, op func(context.Context, redis.Cmdable) error) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx, c); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestHealthyPathRatio measures redisguard's GET and SET throughput against
// go-redis alone on the same server. The machine is shared and noisy, so it
// interleaves short timed runs of each and takes the median of the pairwise
// ratios. It runs only under `make bench` (REDISGUARD_BENCH=1): a timed
// assertion has no place in the ordinary suite.
//
// Each round runs go-redis, redisguard and a second go-redis client with the
// same options (the control) for ratioSlice each, go-redis in the middle and
// the order reversed every other round, so that each ratio compares
// neighbouring runs that saw the same burst of noise and drift favours no
// side. The control's ratio to go-redis is what the method reads for two
// identical clients: its distance from 1 is the resolution of the run.
// go-redis with its defaults runs last, for the "vs defaults" column. Timed
// slices rather than testing.Benchmark, whose ramp-up runs spread a pair
// over half a second and decorrelate the noise the ratio is meant to cancel.
func TestHealthyPathRatio(t *testing.T) {
	if os.Getenv("REDISGUARD_BENCH") != "1" {
		t.Skip("set REDISGUARD_BENCH=1 (make bench) to measure throughput ratios")
	}
	const (
		rounds     = 401
		ratioSlice = 25 * time.Millisecond
	)
	workers := newCallerPool(t, 4*runtime.GOMAXPROCS(0)) // enough callers to keep the CPUs busy
	var rows [][]string
	for _, target := range benchTargets(t) {
		for _, w := range []struct {
			name string
			op   func(context.Context, redis.Cmdable) error
		}{{"GET", getOp}, {"SET", setOp}, {"pipeline of 100", pipelineOp}} {
			var ratios, ctlRatios, defRatios []float64
			rate := map[string][]float64{}
			run := func(c redis.UniversalClient, name string) float64 {
				r := timedSlice(t, workers, c, w.op, ratioSlice, nil)
				rate[name] = append(rate[name], r)
				return r
			}
			for i := range rounds {
				var ctl, gr, rg float64
				if i%2 == 0 {
					ctl, gr, rg = run(target.control, "control"), run(target.stock, "go-redis"), run(target.guarded, "redisguard")
				} else {
					rg, gr, ctl = run(target.guarded, "redisguard"), run(target.stock, "go-redis"), run(target.control, "control")
				}
				def := run(target.defaults, "go-redis-defaults")
				ratios = append(ratios, rg/gr)
				ctlRatios = append(ctlRatios, ctl/gr)
				defRatios = append(defRatios, rg/def)
			}
			rows = append(rows, []string{target.name, w.name,
				fmt.Sprintf("%.0f/s", median(rate["go-redis"])), fmt.Sprintf("%.0f/s", median(rate["redisguard"])),
				fmt.Sprintf("%.3f", median(ratios)), fmt.Sprintf("%.3f-%.3f", slices.Min(ratios), slices.Max(ratios)),
				fmt.Sprintf("%.3f", median(ctlRatios)),
				fmt.Sprintf("%.0f/s", median(rate["go-redis-defaults"])), fmt.Sprintf("%.3f", median(defRatios))})
			// The target is for single commands; the pipeline row is reported.
			if w.name != "pipeline of 100" && median(ratios) < 0.98 {
				t.Errorf("%s %s: median throughput ratio %.3f < 0.98", target.name, w.name, median(ratios))
			}
		}
	}
	table(t, fmt.Sprintf("healthy path: %d rounds of %v timed runs, %d callers (GOMAXPROCS %d); ratio = redisguard/go-redis throughput",
		rounds, ratioSlice, len(workers.work), runtime.GOMAXPROCS(0)),
		[]string{"topology", "workload", "go-redis (same options)", "redisguard", "median ratio", "range", "control ratio", "go-redis (defaults)", "ratio vs defaults"}, rows...)
}

// goRedisLike returns go-redis built with the options of rc, redisguard's
// client, and none of its hooks: what the benchmarks compare redisguard
// with. tweak, if set, changes the copy first. go-redis keeps a client's
// push processor in its options, so the copy gets one of its own: sharing
// rc's, whose handlers are taken, go-redis would build it without the
// maintenance notifications rc runs. That is checked here, before either
// client has sent a command (a server that refuses the notifications has
// both turn them off at their first handshake).
func goRedisLike(t testing.TB, rc *redis.Client, tweak func(*redis.Options)) *redis.Client {
	t.Helper()
	opt := *rc.Options()
	opt.PushNotificationProcessor = nil
	if tweak != nil {
		tweak(&opt)
	}
	c := redis.NewClient(&opt)
	require.Equal(t, rc.GetMaintNotificationsManager() != nil, c.GetMaintNotificationsManager() != nil,
		"go-redis with redisguard's options runs maintenance notifications as redisguard's client does")
	return c
}

// benchTargets starts a standalone server and a 3-master cluster and builds
// the clients for each; everything is closed when tb ends.
func benchTargets(t testing.TB) []benchTarget {
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	var out []benchTarget
	for _, x := range []struct {
		name string
		cfg  Config
	}{
		{"standalone", Config{Addrs: []string{srv.Addr}}},
		{"cluster", Config{Mode: ModeCluster, Addrs: cl.Addrs()}},
	} {
		g := newTestClient(t, x.cfg)
		target := benchTarget{name: x.name, guarded: g}
		switch rc := g.UniversalClient.(type) {
		case *redis.Client:
			target.stock, target.control = goRedisLike(t, rc, nil), goRedisLike(t, rc, nil)
			target.defaults = redis.NewClient(&redis.Options{Addr: srv.Addr})
		case *redis.ClusterClient:
			opt := *rc.Options()
			opt.NewClient = nil // redisguard's constructor installs its node hooks
			target.stock = redis.NewClusterClient(&opt)
			ctl := opt
			target.control = redis.NewClusterClient(&ctl)
			target.defaults = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		}
		t.Cleanup(func() { _ = target.stock.Close(); _ = target.control.Close(); _ = target.defaults.Close() })
		ctx := testCtx(t, 10*time.Second)
		for _, c := range []redis.UniversalClient{target.stock, target.control, target.defaults, target.guarded} {
			require.NoError(t, c.Set(ctx, "bench:key", "value", 0).Err())
		}
		out = append(out, target)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestGetAllocatesNoMoreThanGoRedis is the ordinary suite's guard on the hot
// path: an ordinary GET through redisguard may not allocate more than the
// same GET through go-redis alone, configured the same way (so that what is
// compared is redisguard's hooks, not go-redis options). miniredis serves
// both; it runs in-process, so its allocations are counted too, equally for
// both, and the averages are compared rather than testing.AllocsPerRun's
// floored integers.
func TestGetAllocatesNoMoreThanGoRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.Set("k", "v")
	g := newTestClient(t, Config{Addrs: []string{mr.Addr()}})
	stock := goRedisLike(t, g.UniversalClient.(*redis.Client), nil)
	defer stock.Close()
	ctx := context.Background()
	for _, c := range []redis.UniversalClient{stock, g} {
		require.NoError(t, c.Get(ctx, "k").Err()) // warm the pool
	}
	const runs = 2000
	perGet := func(c redis.UniversalClient) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range runs {
			_ = c.Get(ctx, "k").Err()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / runs
	}
	stockAllocs, guardAllocs := perGet(stock), perGet(g)
	t.Logf("allocations per GET: go-redis %.2f, redisguard %.2f", stockAllocs, guardAllocs)
	// A structural extra allocation shows as +1; anything under half of one
	// is background noise (go-redis's connection health checks, the GC).
	if guardAllocs > stockAllocs+0.5 {
		t.Fatalf("redisguard allocates %.2f per GET, go-redis %.2f", guardAllocs, stockAllocs)
	}
}

// BenchmarkHookPath is the CPU cost redisguard adds to each command before
// the network: the node guard (breaker), the facade (closed check,
// classification, admission) and, on the error path, translation. The hooks
// are composed as build installs them in Standalone mode and end in a no-op
// where go-redis would write to the socket.
func BenchmarkHookPath(b *testing.B) {
	c, err := NewClient(Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(b, err)
	b.Cleanup(func() { _ = c.Close() })
	// The guard as the ordinary Standalone client carries it: the user's
	// hooks (none), then the facade's step, then the guard's.
	guard := c.nodes.guard("127.0.0.1:1")
	guard.facade, guard.user = c.fac, c.hooks.user
	ctx := context.Background()

	b.Run("ordinary", func(b *testing.B) {
		process := guard.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		cmd := redis.NewStringCmd(ctx, "get", "key")
		b.ReportAllocs()
		for b.Loop() {
			_ = process(ctx, cmd)
		}
	})
	b.Run("ordinary-with-a-user-hook", func(b *testing.B) {
		// One AddHook hook that only calls on.
		hooked := guard
		hooked.user = &userHooks{}
		hooked.user.add(hookFuncs{process: func(next redis.ProcessHook) redis.ProcessHook { return next }})
		process := hooked.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		cmd := redis.NewStringCmd(ctx, "get", "key")
		b.ReportAllocs()
		for b.Loop() {
			_ = process(ctx, cmd)
		}
	})
	b.Run("ordinary-nil-reply", func(b *testing.B) {
		// redis.Nil goes through translation and the breaker's outcome.
		process := guard.ProcessHook(func(context.Context, redis.Cmder) error { return redis.Nil })
		cmd := redis.NewStringCmd(ctx, "get", "key")
		b.ReportAllocs()
		for b.Loop() {
			_ = process(ctx, cmd)
		}
	})
	b.Run("pipeline-100", func(b *testing.B) {
		pipeline := guard.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
		cmds := make([]redis.Cmder, 100)
		for i := range cmds {
			cmds[i] = redis.NewStringCmd(ctx, "get", "key:"+strconv.Itoa(i))
		}
		b.ReportAllocs()
		for b.Loop() {
			_ = pipeline(ctx, cmds)
		}
	})
	b.Run("pipeline-100-nil-replies", func(b *testing.B) {
		// Every GET missed: go-redis returns redis.Nil for the batch and on
		// each command, the error path of both hooks.
		cmds := make([]redis.Cmder, 100)
		for i := range cmds {
			cmds[i] = redis.NewStringCmd(ctx, "get", "key:"+strconv.Itoa(i))
		}
		pipeline := guard.ProcessPipelineHook(func(context.Context, []redis.Cmder) error {
			for _, cmd := range cmds {
				cmd.SetErr(redis.Nil)
			}
			return redis.Nil
		})
		b.ReportAllocs()
		for b.Loop() {
			_ = pipeline(ctx, cmds)
		}
	})
	b.Run("blocking", func(b *testing.B) {
		// A blocking call's CPU work before its dedicated connection: the
		// breaker, classification, the long permit (the semaphore's fast
		// path), the long client, the key that picks the node, and
		// translation of its reply. The dedicated connection itself is the
		// network's side of the line.
		cmd := redis.NewStringSliceCmd(ctx, "blpop", "queue", 1)
		n := c.nodes.get("127.0.0.1:1")
		b.ReportAllocs()
		for b.Loop() {
			t, err := n.br.Allow()
			if err != nil || classifyCmd(cmd) != classBlocking {
				b.Fatal("not admitted as a blocking command")
			}
			if _, err := c.adm.client(); err != nil {
				b.Fatal(err)
			}
			if err := c.adm.enter(ctx, ""); err != nil {
				b.Fatal(err)
			}
			if _, ok := blockingKey(cmd.Args()); !ok {
				b.Fatal("no key")
			}
			c.adm.release()
			n.br.Done(t, outcome(ctx, redis.Nil))
			_ = c.fac.translate(ctx, redis.Nil)
		}
	})
}

// TestAutoPipelineRatio measures AutoPipeline GET throughput through
// redisguard against go-redis's AutoPipeline on a go-redis client with the
// same options, in the manner of TestHealthyPathRatio (interleaved timed
// slices, median of the pairwise ratios, a control client for the
// resolution), at 64 callers. It runs only under `make bench`
// (REDISGUARD_BENCH=1). The target is 0.95.
func TestAutoPipelineRatio(t *testing.T) {
	if os.Getenv("REDISGUARD_BENCH") != "1" {
		t.Skip("set REDISGUARD_BENCH=1 (make bench) to measure throughput ratios")
	}
	const (
		rounds  = 201
		slice   = 25 * time.Millisecond
		callers = 64
	)
	pool := newCallerPool(t, callers)
	var rows [][]string
	for _, target := range benchTargets(t) {
		get := func(c redis.UniversalClient) func(context.Context, redis.Cmdable) error {
			ap, err := c.AutoPipeline()
			require.NoError(t, err)
			t.Cleanup(func() { _ = ap.Close() })
			return func(ctx context.Context, _ redis.Cmdable) error { return ap.Get(ctx, "bench:key").Err() }
		}
		sides := map[string]redis.UniversalClient{
			"control": target.control, "go-redis": target.stock, "redisguard": target.guarded, "go-redis-defaults": target.defaults,
		}
		ops := map[string]func(context.Context, redis.Cmdable) error{}
		for name, c := range sides {
			ops[name] = get(c)
		}
		rate := map[string][]float64{}
		run := func(name string) float64 {
			r := timedSlice(t, pool, sides[name], ops[name], slice, nil)
			rate[name] = append(rate[name], r)
			return r
		}
		var ratios, ctlRatios, defRatios []float64
		for i := range rounds {
			var ctl, gr, rg float64
			if i%2 == 0 {
				ctl, gr, rg = run("control"), run("go-redis"), run("redisguard")
			} else {
				rg, gr, ctl = run("redisguard"), run("go-redis"), run("control")
			}
			def := run("go-redis-defaults")
			ratios = append(ratios, rg/gr)
			ctlRatios = append(ctlRatios, ctl/gr)
			defRatios = append(defRatios, rg/def)
		}
		rows = append(rows, []string{target.name,
			fmt.Sprintf("%.0f/s", median(rate["go-redis"])), fmt.Sprintf("%.0f/s", median(rate["redisguard"])),
			fmt.Sprintf("%.3f", median(ratios)), fmt.Sprintf("%.3f-%.3f", slices.Min(ratios), slices.Max(ratios)),
			fmt.Sprintf("%.3f", median(ctlRatios)),
			fmt.Sprintf("%.0f/s", median(rate["go-redis-defaults"])), fmt.Sprintf("%.3f", median(defRatios))})
		if median(ratios) < 0.95 {
			t.Errorf("%s: AutoPipeline GET median throughput ratio %.3f < 0.95", target.name, median(ratios))
		}
	}
	table(t, fmt.Sprintf("AutoPipeline GET: %d rounds of %v timed runs, %d callers (GOMAXPROCS %d); ratio = redisguard/go-redis throughput",
		rounds, slice, callers, runtime.GOMAXPROCS(0)),
		[]string{"topology", "go-redis (same options)", "redisguard", "median ratio", "range", "control ratio", "go-redis (defaults)", "ratio vs defaults"}, rows...)
}
