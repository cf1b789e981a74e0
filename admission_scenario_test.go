package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The starvation scenario of the admission issue: with four connections per
// node, eight 3s BLPOPs on one node. Stock go-redis hands them the node's
// whole pool, so GETs to that node queue behind them and time out. redisguard
// runs four of them on the long budget, refuses the other four after
// PoolTimeout, and the GETs never notice.
func TestScenarioBlockingStarvation(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	node := cl.Masters[0]
	keys := clusterKeys(t, cl, 50)[0]
	list := cl.KeyOn(t, node, "starve:list:")
	const (
		poolTimeout = 300 * time.Millisecond
		blpops      = 8
		blockFor    = 3 * time.Second
		getters     = 4
		getFor      = 2500 * time.Millisecond
	)

	type blpopResult struct {
		lat time.Duration
		err error
	}
	type result struct {
		name       string
		gets       *opRecord
		blpop      []blpopResult
		slotsCalls int
	}
	run := func(name string, c redis.UniversalClient) result {
		ctx := testCtx(t, time.Minute)
		// Warm-up: the pools, the slot map and (redisguard) the long client.
		for range 3 {
			var wg sync.WaitGroup
			for range getters {
				wg.Add(1)
				go func() { defer wg.Done(); _ = c.Get(ctx, keys[0]).Err() }()
			}
			wg.Wait()
		}
		_ = c.Do(ctx, "blpop", list, "0.01").Err()
		before := commandCalls(t, cl.Nodes(), "cluster|slots")

		r := result{name: name, blpop: make([]blpopResult, blpops)}
		var wg sync.WaitGroup
		for i := range blpops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				err := c.BLPop(ctx, blockFor, list).Err()
				r.blpop[i] = blpopResult{time.Since(start), err}
			}()
		}
		time.Sleep(20 * time.Millisecond) // the BLPOPs take their connections first
		r.gets = runLoad(getters, getFor, func(ctx context.Context, rng *rand.Rand) (int, error) {
			return 0, c.Get(ctx, keys[rng.IntN(len(keys))]).Err()
		})
		wg.Wait()
		r.slotsCalls = commandCalls(t, cl.Nodes(), "cluster|slots") - before
		return r
	}

	stock := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 4, PoolTimeout: poolTimeout})
	rs := run("go-redis", stock)
	_ = stock.Close()
	waitBlocked(t, node, 0)

	guard := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), MaxConnections: 4,
		MaxLongConnections: 4, PoolTimeout: poolTimeout})
	rg := run("redisguard", guard)

	summarize := func(r result) (row []string, exhausted []time.Duration, nils, others int) {
		for _, b := range r.blpop {
			switch {
			case errors.Is(b.err, ErrPoolExhausted):
				exhausted = append(exhausted, b.lat)
			case b.err == redis.Nil:
				nils++
			default:
				others++
			}
		}
		ok := r.gets.filter(-1, 0, time.Hour, okOps)
		bad := r.gets.filter(-1, 0, time.Hour, errOps)
		all := r.gets.filter(-1, 0, time.Hour, nil)
		var slowest time.Duration
		for _, d := range exhausted {
			slowest = max(slowest, d)
		}
		row = []string{r.name, strconv.Itoa(len(ok)), strconv.Itoa(len(bad)), fmtDur(percentile(all, 50)),
			fmtDur(percentile(all, 99)), fmt.Sprintf("%d (slowest %s)", len(exhausted), fmtDur(slowest)),
			strconv.Itoa(nils), strconv.Itoa(others), strconv.Itoa(r.slotsCalls)}
		return row, exhausted, nils, others
	}
	stockRow, _, _, _ := summarize(rs)
	guardRow, exhausted, nils, others := summarize(rg)
	table(t, fmt.Sprintf("%d BLPOPs (%s) and %d GET loops (%s) on one node; 4 connections per node, PoolTimeout %s",
		blpops, blockFor, getters, getFor, poolTimeout),
		[]string{"client", "GET ok", "GET errors", "GET p50", "GET p99", "BLPOP ErrPoolExhausted", "BLPOP nil", "BLPOP other", "CLUSTER SLOTS"},
		stockRow, guardRow)
	t.Logf("go-redis GET errors: %s", errorKinds(rs.gets.filter(-1, 0, time.Hour, errOps)))
	var stockBlpopErrs []op
	for _, b := range rs.blpop {
		stockBlpopErrs = append(stockBlpopErrs, op{err: b.err})
	}
	t.Logf("go-redis BLPOP errors: %s", errorKinds(stockBlpopErrs))

	all := rg.gets.filter(-1, 0, time.Hour, nil)
	assert.NotEmpty(t, all)
	assert.Empty(t, rg.gets.filter(-1, 0, time.Hour, errOps), "GETs failed: %s", errorKinds(rg.gets.filter(-1, 0, time.Hour, errOps)))
	assert.LessOrEqual(t, percentile(all, 99), pick(5*time.Millisecond, 100*time.Millisecond), "GET p99")
	assert.Len(t, exhausted, 4, "exactly the BLPOPs beyond the budget must be refused")
	for _, d := range exhausted {
		assert.GreaterOrEqual(t, d, poolTimeout-10*time.Millisecond, "refused before PoolTimeout")
		assert.LessOrEqual(t, d, poolTimeout+pick(100*time.Millisecond, time.Second), "refused late")
	}
	assert.Equal(t, 4, nils, "the admitted BLPOPs must time out normally")
	assert.Zero(t, others)
	assert.Zero(t, rg.slotsCalls, "topology calls during the run")
	st := guard.Stats()
	assert.Equal(t, uint64(4), st.LongExhaustions)
	assert.Zero(t, st.PoolExhaustions)
	for _, n := range st.Nodes {
		assert.Zero(t, n.Opens, "breaker of %s opened", n.Addr)
	}
}
