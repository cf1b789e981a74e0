package redisguard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// How the chaos soak judges its once-only operations (chaos_once_test.go):
// by the counts their keys hold on the servers at the end, against what
// each caller was told.

// onceVerdict is what the counts on the servers make of the once-only
// operations.
type onceVerdict struct {
	ops, auto, script int
	// Outcomes as told: ran once; unknown and ran, or did not; did not run
	// and did not.
	ranOnce, maybeRan, maybeNot, notRun int
	// Violations: ran more than once (by its count, or by its own INCR's
	// answer); told it ran and found never run on a shard no data-losing
	// fault touched; told it did not run and found run; never answered.
	twice, lost, ranUntold, unanswered int
	// told it ran, found never run, on a shard a data-losing fault touched:
	// reported, not failed.
	lostLossy int
	samples   []string
}

// add judges one operation: told, and count, the value of its key now;
// lossy says a data-losing fault touched a shard its key lived on.
func (v *onceVerdict) add(kind, key string, told onceTold, count int64, lossy bool) {
	v.ops++
	switch kind {
	case "once-auto":
		v.auto++
	case "once-script":
		v.script++
	}
	bad := ""
	switch {
	case count > 1 || told == toldRanBefore:
		v.twice++
		bad = "ran twice"
	case told == toldRan && count == 1:
		v.ranOnce++
	case told == toldRan && lossy:
		v.lostLossy++
	case told == toldRan:
		v.lost++
		bad = "lost"
	case told == toldMaybe && count == 1:
		v.maybeRan++
	case told == toldMaybe:
		v.maybeNot++
	case told == toldNothing:
		v.unanswered++
		bad = "never answered"
	case count == 0:
		v.notRun++
	default:
		v.ranUntold++
		bad = "ran although told it did not"
	}
	if bad != "" && len(v.samples) < 10 {
		v.samples = append(v.samples, fmt.Sprintf("%s %s: %s (told %s, count %d)", kind, key, bad, told, count))
	}
}

func (v onceVerdict) ok() bool { return v.twice+v.lost+v.ranUntold+v.unanswered == 0 }

func (t onceTold) String() string {
	return [...]string{"nothing", "ran", "ran, answering more than 1", "outcome unknown", "did not run"}[t]
}

// onceBatch bounds the keys of one MGET in the read-back.
const onceBatch = 500

// readOnce reads every once-only operation's count through c, one MGET per
// key group and onceBatch keys, and judges each; lossy says whether a
// data-losing fault touched a shard a key lived on.
func readOnce(ctx context.Context, c redis.Cmdable, writers []*onceWriter, lossy func(key string) bool) (onceVerdict, error) {
	var v onceVerdict
	for _, o := range writers {
		for g := range onceGroups {
			var keys []string
			var ns []int
			flush := func() error {
				if len(keys) == 0 {
					return nil
				}
				vals, err := c.MGet(ctx, keys...).Result()
				if err != nil {
					return fmt.Errorf("MGET of %d keys from %s: %w", len(keys), keys[0], err)
				}
				for i, val := range vals {
					var count int64
					if s, ok := val.(string); ok {
						if count, err = strconv.ParseInt(s, 10, 64); err != nil {
							return fmt.Errorf("%s holds %q: %w", keys[i], s, err)
						}
					}
					v.add(o.kind, keys[i], o.told[ns[i]], count, lossy(keys[i]))
				}
				keys, ns = keys[:0], ns[:0]
				return nil
			}
			for n := g; n < len(o.told); n += onceGroups {
				keys, ns = append(keys, onceKey(o.id, n)), append(ns, n)
				if len(keys) == onceBatch {
					if err := flush(); err != nil {
						return v, err
					}
				}
			}
			if err := flush(); err != nil {
				return v, err
			}
		}
	}
	return v, nil
}

// checkOnce judges the once-only operations by their counts on the
// cluster, lossy being the shards where a fault may have lost writes.
func (w *chaosWorld) checkOnce(t *testing.T, lossy map[int]bool) onceVerdict {
	t.Helper()
	w.onceMu.Lock()
	writers := append([]*onceWriter(nil), w.once...)
	w.onceMu.Unlock()
	v, err := readOnce(testCtx(t, time.Minute), w.c, writers, func(key string) bool { return w.keyLossy(key, lossy) })
	if err != nil {
		t.Errorf("once-only read-back: %v", err)
	}
	return v
}

// The verdict fails on every way an unsafe command can run otherwise than
// its caller was told, and passes on every way it may.
func TestOnceVerdict(t *testing.T) {
	for _, tc := range []struct {
		name  string
		told  onceTold
		count int64
		lossy bool
		field func(*onceVerdict) *int
		ok    bool
	}{
		{"told it ran, ran once", toldRan, 1, false, func(v *onceVerdict) *int { return &v.ranOnce }, true},
		{"told it ran, ran twice", toldRan, 2, false, func(v *onceVerdict) *int { return &v.twice }, false},
		{"answered 2, counted once", toldRanBefore, 1, false, func(v *onceVerdict) *int { return &v.twice }, false},
		{"told it ran, never ran", toldRan, 0, false, func(v *onceVerdict) *int { return &v.lost }, false},
		{"told it ran, never ran, lossy shard", toldRan, 0, true, func(v *onceVerdict) *int { return &v.lostLossy }, true},
		{"told it ran, ran twice, lossy shard", toldRan, 2, true, func(v *onceVerdict) *int { return &v.twice }, false},
		{"unknown, ran", toldMaybe, 1, false, func(v *onceVerdict) *int { return &v.maybeRan }, true},
		{"unknown, did not", toldMaybe, 0, false, func(v *onceVerdict) *int { return &v.maybeNot }, true},
		{"unknown, ran twice", toldMaybe, 2, false, func(v *onceVerdict) *int { return &v.twice }, false},
		{"told it did not run, did not", toldNotRun, 0, false, func(v *onceVerdict) *int { return &v.notRun }, true},
		{"told it did not run, ran", toldNotRun, 1, false, func(v *onceVerdict) *int { return &v.ranUntold }, false},
		{"told it did not run, ran, lossy shard", toldNotRun, 1, true, func(v *onceVerdict) *int { return &v.ranUntold }, false},
		{"told it did not run, ran twice", toldNotRun, 2, false, func(v *onceVerdict) *int { return &v.twice }, false},
		{"never answered", toldNothing, 0, false, func(v *onceVerdict) *int { return &v.unanswered }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v onceVerdict
			v.add("once-script", "k", tc.told, tc.count, tc.lossy)
			if got := *tc.field(&v); got != 1 {
				t.Fatalf("%+v: the expected counter is %d, want 1", v, got)
			}
			if v.ok() != tc.ok {
				t.Fatalf("ok() = %v, want %v: %+v", v.ok(), tc.ok, v)
			}
			if !tc.ok && len(v.samples) != 1 {
				t.Fatalf("a violation without a sample: %+v", v)
			}
		})
	}
}

// Read back from a server, a doubled INCR fails the soak's report, as do an
// INCR that ran although its caller was told it did not and one told it ran
// that never did; the outcomes that may be pass.
func TestReadOnceCatchesARepeatedIncr(t *testing.T) {
	srv := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := testCtx(t, 10*time.Second)
	o := &onceWriter{id: 7, kind: "once-auto"}
	runs := []struct {
		told  onceTold
		times int
	}{
		{toldRan, 1}, {toldRan, 2}, {toldNotRun, 1}, {toldRan, 0}, {toldMaybe, 1}, {toldMaybe, 0}, {toldNotRun, 0},
	}
	for i, r := range runs {
		n := o.issue(1)
		require.Equal(t, i, n)
		o.told[n] = r.told
		for range r.times {
			require.NoError(t, c.Incr(ctx, onceKey(o.id, n)).Err())
		}
	}
	v, err := readOnce(ctx, c, []*onceWriter{o}, func(string) bool { return false })
	require.NoError(t, err)
	assert.Equal(t, onceVerdict{ops: 7, auto: 7, ranOnce: 1, twice: 1, ranUntold: 1, lost: 1, maybeRan: 1, maybeNot: 1, notRun: 1},
		onceVerdict{ops: v.ops, auto: v.auto, ranOnce: v.ranOnce, twice: v.twice, ranUntold: v.ranUntold, lost: v.lost,
			maybeRan: v.maybeRan, maybeNot: v.maybeNot, notRun: v.notRun})
	report := chaosReport{once: v}.String()
	assert.Contains(t, report, "[FAIL] no unsafe command ran twice")
	assert.Contains(t, report, "[FAIL] each once-only op ran as often as its caller was told")
	assert.True(t, strings.Contains(report, onceKey(o.id, 1)+": ran twice"), report)
}
