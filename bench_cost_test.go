//go:build unix

package redisguard

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// TestBenchCost splits redisguard's healthy-path cost on a standalone
// server into its parts, where TestBenchScale only sees the sum: beside
// go-redis with redisguard's options, the same client whose connections
// are tracked as a node guard tracks them (connSet.track, without a hang
// watch), that one with a process hook that only calls next (the least
// any hook costs: redisguard's floor), and redisguard itself, interleaved
// as TestBenchScale's cells are (a round runs each client for one timed
// slice, in a random order). It
// reports each client's rate as a ratio to go-redis's, round by round, and
// the process's CPU time per call (user and system, getrusage), which
// moves less with the machine's noise than the rates do.
//
// REDISGUARD_BENCH_COST=64,512 sets the caller counts (about 35 seconds
// each); REDISGUARD_BENCH_COST_OP=SET measures SET instead of GET.
func TestBenchCost(t *testing.T) {
	spec := os.Getenv("REDISGUARD_BENCH_COST")
	if spec == "" {
		t.Skip("set REDISGUARD_BENCH_COST to caller counts, e.g. 64,512, to split the healthy path's cost")
	}
	var callers []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(t, err, "REDISGUARD_BENCH_COST")
		require.Positive(t, n, "REDISGUARD_BENCH_COST")
		callers = append(callers, n)
	}
	srv := redistest.StartServer(t)
	g := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	rc := g.UniversalClient.(*redis.Client)
	track := func(opt *redis.Options) {
		dial := opt.Dialer
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return (&connSet{}).track(conn, nil), nil
		}
	}
	hooked := goRedisLike(t, rc, track)
	hooked.AddHook(forwardHook{})
	names := []string{"go-redis (same options)", "control", "go-redis, connections tracked",
		"go-redis, connections tracked, one hook that calls next", "redisguard"}
	sides := []redis.UniversalClient{goRedisLike(t, rc, nil), goRedisLike(t, rc, nil), goRedisLike(t, rc, track), hooked, g}
	ctx := testCtx(t, 10*time.Second)
	for _, c := range sides[:4] {
		t.Cleanup(func() { _ = c.Close() })
	}
	for _, c := range sides {
		require.NoError(t, c.Set(ctx, "bench:key", "value", 0).Err())
	}
	op := func(ctx context.Context, c redis.Cmdable) error { return c.Get(ctx, "bench:key").Err() }
	if os.Getenv("REDISGUARD_BENCH_COST_OP") == "SET" {
		op = func(ctx context.Context, c redis.Cmdable) error { return c.Set(ctx, "bench:key", "value", 0).Err() }
	}
	const rounds, slice = 241, 25 * time.Millisecond
	for _, n := range callers {
		pool := newCallerPool(t, n)
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		ratios := make([][]float64, len(sides))
		cpu := make([]time.Duration, len(sides))
		calls := make([]float64, len(sides))
		for range rounds {
			rates := make([]float64, len(sides))
			for _, s := range rng.Perm(len(sides)) {
				before, start := processCPU(t), time.Now()
				rates[s] = timedSlice(t, pool, sides[s], op, slice, nil)
				cpu[s] += processCPU(t) - before
				calls[s] += rates[s] * time.Since(start).Seconds()
			}
			for s := range sides {
				ratios[s] = append(ratios[s], rates[s]/rates[0])
			}
		}
		perCall := func(s int) float64 { return float64(cpu[s]) / calls[s] }
		for s := 1; s < len(sides); s++ {
			r, se := trimmedMean(ratios[s], 0.1)
			t.Logf("%d callers, %s: rate %.3f ± %.3f of go-redis's; CPU %.0fns a call, %.3f of go-redis's (%.0fns)",
				n, names[s], r, se, perCall(s), perCall(s)/perCall(0), perCall(0))
		}
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// forwardHook is a hook whose process and pipeline steps only call next,
// each from a frame of its own, as any hook's do.
type forwardHook struct{}

func (forwardHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (forwardHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return next(ctx, cmd) }
}

func (forwardHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds) }
}
