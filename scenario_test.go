package redisguard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Scenario tests drive the same workload through stock go-redis and through
// redisguard against real servers, and print the two side by side. Under
// `make test` they run shortened, with -race, and assert behaviour with
// generous bounds; `make scenarios` runs them at full length without -race
// and checks the targets. The README's figures come from the latter.

// scenarioFull reports whether scenarios run at full length with strict targets.
func scenarioFull() bool { return os.Getenv("REDISGUARD_SCENARIO") == "full" }

// sideBySide starts a long real-server test that spends its time waiting
// for failovers, elections and timeouts rather than computing: skipped
// under -short, and under `make test` run beside others of its kind (go
// test's -parallel, which the Makefile sets to 3), after the tests that run
// alone. That keeps the suite within CI's budget on two cores; the short
// forms' bounds leave room for it. At full length (`make scenarios`) it
// runs alone: its figures are the issues' targets.
func sideBySide(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long real-server test")
	}
	if !scenarioFull() {
		t.Parallel()
	}
}

// alone starts a real-server test that compares recovery timings or
// blocking budgets: skipped under -short, and never run beside others,
// whose load on two cores moves the timings it compares.
func alone(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("real servers")
	}
}

// fullOnly starts a scenario that runs only at full length (`make
// scenarios`): one whose promise make test already checks elsewhere in a
// shorter form (a test of its own, or the chaos soak's faults), left out of
// make test to keep it within CI's budget. It runs alone.
func fullOnly(t *testing.T) {
	t.Helper()
	if !scenarioFull() {
		t.Skip("a full-length scenario (make scenarios)")
	}
}

// pick returns full in full mode, short otherwise.
func pick[T any](full, short T) T {
	if scenarioFull() {
		return full
	}
	return short
}

// op is one operation's record. at is its start, relative to the run's start.
type op struct {
	at, lat time.Duration
	late    time.Duration // paced ops: how long after its scheduled start it was called
	group   int           // which key group the op touched (e.g. faulted node vs healthy)
	err     error
}

// opRecord collects ops from many workers without a shared lock on the hot
// path: each worker appends to its own slice.
type opRecord struct {
	start time.Time
	per   [][]op
}

// runLoad runs workers goroutines calling fn until d has passed, then waits
// for all of them. fn returns the group it touched and its error.
func runLoad(workers int, d time.Duration, fn func(ctx context.Context, rng *rand.Rand) (int, error)) *opRecord {
	rec := &opRecord{start: time.Now(), per: make([][]op, workers)}
	stop := rec.start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for {
				t0 := time.Now()
				if !t0.Before(stop) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				g, err := fn(ctx, rng)
				cancel()
				rec.per[w] = append(rec.per[w], op{at: t0.Sub(rec.start), lat: time.Since(t0), group: g, err: err})
			}
		}()
	}
	wg.Wait()
	return rec
}

// filter returns the ops in group g (or any group when g < 0) started in [from, to).
func (r *opRecord) filter(g int, from, to time.Duration, keep func(op) bool) []op {
	var out []op
	for _, ops := range r.per {
		for _, o := range ops {
			if o.at >= from && o.at < to && (g < 0 || o.group == g) && (keep == nil || keep(o)) {
				out = append(out, o)
			}
		}
	}
	return out
}

func okOps(o op) bool  { return o.err == nil }
func errOps(o op) bool { return o.err != nil }

// rate is successful ops per second in group g over [from, to).
func (r *opRecord) rate(g int, from, to time.Duration) float64 {
	return float64(len(r.filter(g, from, to, okOps))) / (to - from).Seconds()
}

// percentile returns the p-th percentile latency of ops (p in [0,100]).
func percentile(ops []op, p float64) time.Duration {
	if len(ops) == 0 {
		return 0
	}
	lat := make([]time.Duration, len(ops))
	for i, o := range ops {
		lat[i] = o.lat
	}
	slices.Sort(lat)
	i := int(float64(len(lat)-1) * p / 100)
	return lat[i]
}

// errorKinds summarises the distinct errors in ops, most frequent first.
func errorKinds(ops []op) string {
	counts := map[string]int{}
	for _, o := range ops {
		if o.err != nil {
			msg := o.err.Error()
			if len(msg) > 60 {
				msg = msg[:60]
			}
			counts[msg]++
		}
	}
	type kv struct {
		k string
		v int
	}
	var kvs []kv
	for k, v := range counts {
		kvs = append(kvs, kv{k, v})
	}
	slices.SortFunc(kvs, func(a, b kv) int { return b.v - a.v })
	var b strings.Builder
	for i, e := range kvs {
		if i == 3 {
			break
		}
		fmt.Fprintf(&b, "%dx %q; ", e.v, e.k)
	}
	return b.String()
}

// table prints rows of columns aligned, for the side-by-side reports.
func table(t *testing.T, title string, header []string, rows ...[]string) {
	t.Helper()
	widths := make([]int, len(header))
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n", title)
	for _, r := range append([][]string{header}, rows...) {
		for i, c := range r {
			fmt.Fprintf(&b, "  %-*s", widths[i], c)
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}

// clusterKeys returns n keys per master, grouped by the master that owns
// them (group i is c.Masters[i]), and seeds them with values.
func clusterKeys(t *testing.T, c *redistest.Cluster, n int) [][]string {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	slotOwner := slotShards(t, c)
	groups := make([][]string, len(c.Masters))
	for i := 0; slices.ContainsFunc(groups, func(g []string) bool { return len(g) < n }); i++ {
		k := "scenario:" + strconv.Itoa(i)
		g := slotOwner[redistest.Slot(k)]
		if len(groups[g]) < n {
			groups[g] = append(groups[g], k)
		}
	}
	seed := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer seed.Close()
	for _, g := range groups {
		_, err := seed.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range g {
				p.Set(ctx, k, "v", 0)
			}
			return nil
		})
		require.NoError(t, err)
	}
	return groups
}

// slotShards maps each slot to the index of the master that owns it at start.
func slotShards(t *testing.T, cl *redistest.Cluster) []int {
	t.Helper()
	owner := map[string]int{}
	for i, m := range cl.Masters {
		owner[m.Addr] = i
	}
	slots, err := cl.Masters[0].Admin().ClusterSlots(testCtx(t, 10*time.Second)).Result()
	require.NoError(t, err)
	out := make([]int, 16384)
	for _, s := range slots {
		for sl := s.Start; sl <= s.End; sl++ {
			out[sl] = owner[s.Nodes[0].Addr]
		}
	}
	return out
}

// commandCalls sums INFO commandstats calls of cmd (e.g. "cluster|slots")
// over servers that answer.
func commandCalls(t *testing.T, servers []*redistest.Server, cmd string) int {
	t.Helper()
	return commandStatField(t, servers, cmd, "calls")
}

// commandStatField sums one field of INFO commandstats for cmd (calls,
// rejected_calls, failed_calls) over servers that answer.
func commandStatField(t *testing.T, servers []*redistest.Server, cmd, field string) int {
	t.Helper()
	total := 0
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err := s.Admin().Info(ctx, "commandstats").Result()
		cancel()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_"+cmd+":") {
				continue
			}
			for _, f := range strings.Split(strings.TrimPrefix(line, "cmdstat_"+cmd+":"), ",") {
				if v, ok := strings.CutPrefix(f, field+"="); ok {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					total += n
				}
			}
		}
	}
	return total
}

func fmtRate(r float64) string              { return strconv.FormatFloat(r, 'f', 0, 64) + "/s" }
func fmtDur(d time.Duration) string         { return d.Round(10 * time.Microsecond).String() }
func fmtPct(f float64) string               { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }
func fmtCount[T ~int | ~uint64](n T) string { return strconv.FormatUint(uint64(n), 10) }
