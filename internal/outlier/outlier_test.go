package outlier

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestLatencyFollowsSamplesByTime(t *testing.T) {
	var l Latency
	_, _, _, ok := l.Estimate()
	assert.False(t, ok, "no sample yet")

	l.Observe(t0, time.Millisecond)
	d, at, n, ok := l.Estimate()
	require.True(t, ok)
	assert.Equal(t, time.Millisecond, d, "the first sample is the estimate")
	assert.True(t, t0.Equal(at))
	assert.Equal(t, uint64(1), n)

	// One slow answer among many fast ones barely moves it.
	now := t0
	for range 1000 {
		now = now.Add(time.Millisecond)
		l.Observe(now, time.Millisecond)
	}
	l.Observe(now.Add(time.Millisecond), 100*time.Millisecond)
	d, _, _, _ = l.Estimate()
	assert.Less(t, d, 2*time.Millisecond, "one outlier sample: %v", d)

	// A node that turns slow is seen within a few Decay, whatever the rate.
	for i := range 2000 {
		now = now.Add(time.Millisecond)
		l.Observe(now, 100*time.Millisecond)
		if time.Duration(i)*time.Millisecond == 2*Decay {
			d, _, _, _ = l.Estimate()
			assert.Greater(t, d, 80*time.Millisecond, "after 2 Decay of slow samples")
		}
	}
	// ... and a sparse stream after a long silence is taken as it is.
	l.Observe(now.Add(time.Minute), time.Millisecond)
	d, _, _, _ = l.Estimate()
	assert.Equal(t, time.Millisecond, d)
}

// cluster feeds latencies to a set of nodes every step (50ms unless set)
// and evaluates every 250ms, as the client does.
type cluster struct {
	t     *testing.T
	d     *Detector
	step  time.Duration
	times []time.Time // when each change returned by run happened
	now   time.Time
	nodes []Node
	lat   map[string]time.Duration // what each node answers in now; 0: no traffic
}

func newCluster(t *testing.T, s Settings, groups ...string) *cluster {
	c := &cluster{t: t, d: NewDetector(s), step: 50 * time.Millisecond, now: t0, lat: map[string]time.Duration{}}
	for i, g := range groups {
		id := fmt.Sprintf("n%d", i)
		c.nodes = append(c.nodes, Node{ID: id, Group: g, Latency: &Latency{}})
		c.lat[id] = time.Millisecond
	}
	return c
}

// run advances time by d and returns the changes seen meanwhile.
func (c *cluster) run(d time.Duration) []Change {
	var out []Change
	end := c.now.Add(d)
	for c.now.Before(end) {
		c.now = c.now.Add(c.step)
		for _, n := range c.nodes {
			if l := c.lat[n.ID]; l > 0 {
				for range 4 {
					n.Latency.Observe(c.now, l)
				}
			}
		}
		if c.now.Sub(t0)%(250*time.Millisecond) == 0 {
			ch := c.d.Evaluate(c.now, c.nodes)
			out = append(out, ch...)
			for range ch {
				c.times = append(c.times, c.now)
			}
		}
	}
	return out
}

func marked(c *cluster) []string {
	var out []string
	for _, n := range c.nodes {
		if c.d.Marked(n.ID) {
			out = append(out, n.ID)
		}
	}
	return out
}

func TestDetectorMarksASlowNodeAfterMarkAfterOnly(t *testing.T) {
	c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
	assert.Empty(t, c.run(5*time.Second), "healthy nodes are never marked")

	c.lat["n2"] = 50 * time.Millisecond
	ch := c.run(DefaultMarkAfter / 2)
	assert.Empty(t, ch, "not before MarkAfter")
	ch = c.run(DefaultMarkAfter + Decay*2)
	require.Len(t, ch, 1)
	assert.Equal(t, "n2", ch[0].ID)
	assert.True(t, ch[0].Marked)
	assert.Equal(t, "slow", ch[0].Reason)
	assert.Greater(t, ch[0].Latency, 10*time.Millisecond)
	assert.Equal(t, time.Millisecond, ch[0].Peers)
	assert.WithinDuration(t, c.now.Add(DefaultEjection), ch[0].Until, DefaultMarkAfter+2*Decay, "first mark: Ejection")
	assert.Equal(t, []string{"n2"}, marked(c))
}

// A node that recovers before MarkAfter is not marked on its past: its
// estimate lags for a few Decay, the mean of its latest samples does not.
func TestDetectorDoesNotMarkANodeThatHasRecovered(t *testing.T) {
	c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
	// Sampled as a node under load is: samples far apart (sparse traffic)
	// make recentMean err toward the old estimate, so toward marking.
	c.step = 5 * time.Millisecond
	require.Empty(t, c.run(2*time.Second))

	c.lat["n2"] = 500 * time.Millisecond
	require.Empty(t, c.run(900*time.Millisecond), "not before MarkAfter")
	c.lat["n2"] = time.Millisecond
	require.Empty(t, c.run(100*time.Millisecond))
	est, _, _, _ := c.nodes[2].Latency.Estimate()
	require.Greater(t, est, 100*time.Millisecond, "the estimate still says slow")
	assert.Empty(t, c.run(3*time.Second), "recovered before its mark was due")
	assert.Empty(t, marked(c))

	// The same slowdown, lasting, is marked as before.
	c.lat["n2"] = 500 * time.Millisecond
	ch := c.run(DefaultMarkAfter + Decay)
	require.Len(t, ch, 1)
	assert.True(t, ch[0].Marked)
	assert.Equal(t, "n2", ch[0].ID)
}

func TestRecentMean(t *testing.T) {
	var l Latency
	now := t0
	for range 40 { // 2s at 10ms: the estimate settles on 10ms
		now = now.Add(50 * time.Millisecond)
		l.Observe(now, 10*time.Millisecond)
	}
	e0, a0, _, _ := l.Estimate()
	for range 5 { // 250ms of 2ms samples
		now = now.Add(50 * time.Millisecond)
		l.Observe(now, 2*time.Millisecond)
	}
	e1, a1, _, _ := l.Estimate()
	assert.Greater(t, e1, 5*time.Millisecond, "the estimate is still half way")
	assert.InDelta(t, float64(2*time.Millisecond), float64(recentMean(e0, a0, e1, a1)), float64(500*time.Microsecond))
}

func TestDetectorUnmarksANodeThatRecovers(t *testing.T) {
	c := newCluster(t, Settings{Ejection: time.Minute}, "a", "a", "b", "b", "c", "c")
	c.lat["n2"] = 50 * time.Millisecond
	require.NotEmpty(t, c.run(3*time.Second))
	require.Equal(t, []string{"n2"}, marked(c))

	c.lat["n2"] = time.Millisecond
	ch := c.run(DefaultUnmarkAfter)
	assert.Empty(t, ch, "still within UnmarkAfter (and the average still falling)")
	ch = c.run(2 * time.Second)
	require.Len(t, ch, 1)
	assert.False(t, ch[0].Marked)
	assert.Equal(t, "recovered", ch[0].Reason)
	assert.Empty(t, marked(c))
}

func TestDetectorMarksExpireAndGrowForARepeatOffender(t *testing.T) {
	c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
	c.lat["n4"] = 80 * time.Millisecond
	var marks []time.Duration
	var ch []Change
	var markedAt time.Time
	for range 40 {
		for _, x := range c.run(time.Second) {
			ch = append(ch, x)
			if x.Marked {
				markedAt = c.now
				marks = append(marks, x.Until.Sub(c.now))
			} else {
				assert.Equal(t, "expired", x.Reason, "it never got fast")
				assert.False(t, markedAt.IsZero())
			}
		}
	}
	require.GreaterOrEqual(t, len(marks), 3, "%v", ch)
	// An expired mark is not given again at once: the node takes traffic
	// until it has been slow for MarkAfter anew.
	require.Len(t, c.times, len(ch))
	for i := 1; i < len(ch); i++ {
		if !ch[i-1].Marked && ch[i].Marked {
			assert.GreaterOrEqual(t, c.times[i].Sub(c.times[i-1]), 2*DefaultMarkAfter, "re-marked %v after expiring", c.times[i].Sub(c.times[i-1]))
		}
	}
	// Each mark is about twice the one before, up to MaxEjection (the
	// evaluation falls within the last second of run).
	assert.InDelta(t, DefaultEjection, marks[0], float64(time.Second))
	assert.InDelta(t, 2*DefaultEjection, marks[1], float64(time.Second))
	assert.InDelta(t, 4*DefaultEjection, marks[2], float64(time.Second))
	for _, m := range marks[3:] {
		assert.LessOrEqual(t, m, DefaultMaxEjection)
	}
}

func TestDetectorBounds(t *testing.T) {
	t.Run("one node per group", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c", "d", "d")
		c.lat["n0"], c.lat["n1"] = 60*time.Millisecond, 50*time.Millisecond
		c.run(5 * time.Second)
		assert.Equal(t, []string{"n0"}, marked(c), "the worst of the shard only")
	})
	t.Run("never half the nodes", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "b", "c", "d", "e", "f")
		c.lat["n0"], c.lat["n1"], c.lat["n2"] = 60*time.Millisecond, 50*time.Millisecond, 40*time.Millisecond
		c.run(5 * time.Second)
		assert.Equal(t, []string{"n0", "n1"}, marked(c), "three slow of six: the worst two, under half")

		c = newCluster(t, Settings{}, "a", "b", "c", "d", "e", "f", "g")
		c.lat["n0"], c.lat["n1"], c.lat["n2"] = 60*time.Millisecond, 50*time.Millisecond, 40*time.Millisecond
		c.run(5 * time.Second)
		assert.Equal(t, []string{"n0", "n1", "n2"}, marked(c), "three of seven is under half")

		c = newCluster(t, Settings{}, "a", "b", "c", "d", "e", "f")
		for _, id := range []string{"n0", "n1", "n2", "n3"} {
			c.lat[id] = 60 * time.Millisecond
		}
		c.run(5 * time.Second)
		assert.Empty(t, marked(c), "four slow of six: the median is slow, nothing stands out")

		c = newCluster(t, Settings{}, "a", "b")
		c.lat["n0"] = 60 * time.Millisecond
		c.run(5 * time.Second)
		assert.Empty(t, marked(c), "one of two is half")
	})
	t.Run("a node out counts toward the half", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "b", "c", "d")
		c.nodes[3].Out = true // its breaker is open; its samples are from before
		c.lat["n0"] = 60 * time.Millisecond
		c.run(5 * time.Second)
		assert.Empty(t, marked(c), "one out and one marked of four is half")

		c = newCluster(t, Settings{}, "a", "b", "c", "d", "e")
		c.nodes[4].Out = true
		c.lat["n0"] = 60 * time.Millisecond
		c.lat["n4"] = 60 * time.Millisecond
		c.run(5 * time.Second)
		assert.Equal(t, []string{"n0"}, marked(c), "two of five are under half; the node out is never marked")
	})
	t.Run("every node slow", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
		for id := range c.lat {
			c.lat[id] = 80 * time.Millisecond
		}
		assert.Empty(t, c.run(10*time.Second))
	})
	t.Run("below the floor", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
		for id := range c.lat {
			c.lat[id] = 100 * time.Microsecond
		}
		c.lat["n3"] = 3 * time.Millisecond // 30 times its peers, under 5ms
		assert.Empty(t, c.run(5*time.Second))
	})
	t.Run("one peer is no median", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "b", "c")
		c.lat["n0"] = 0 // down: no answers, no samples
		c.lat["n1"] = 40 * time.Millisecond
		c.lat["n2"] = 5 * time.Millisecond
		assert.Empty(t, c.run(5*time.Second), "two nodes answering: one is not slower than its peers")
	})
	t.Run("stale nodes are neither judged nor peers", func(t *testing.T) {
		c := newCluster(t, Settings{}, "a", "b", "c")
		c.lat["n0"], c.lat["n1"] = 0, 0 // no traffic at all
		c.lat["n2"] = 80 * time.Millisecond
		assert.Empty(t, c.run(5*time.Second), "nothing to compare with")
	})
}

func TestDetectorForgetsNodesNoLongerListed(t *testing.T) {
	c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
	c.lat["n2"] = 50 * time.Millisecond
	c.run(3 * time.Second)
	require.True(t, c.d.Marked("n2"))
	c.nodes = c.nodes[:2]
	c.d.Evaluate(c.now, c.nodes)
	assert.False(t, c.d.Marked("n2"))
}

func TestMedianWithout(t *testing.T) {
	ms := time.Millisecond
	assert.Equal(t, 2*ms, medianWithout([]time.Duration{1 * ms, 2 * ms, 3 * ms, 90 * ms}, 90*ms))
	assert.Equal(t, 3*ms/2, medianWithout([]time.Duration{1 * ms, 2 * ms, 90 * ms}, 90*ms))
	assert.Equal(t, time.Duration(0), medianWithout([]time.Duration{1 * ms}, 1*ms))
}

func TestLatencyConcurrentObserveAllocatesNothing(t *testing.T) {
	var l Latency
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 1000 {
				l.Observe(t0.Add(time.Duration(g*1000+i)*time.Microsecond), time.Millisecond)
			}
		}()
	}
	for range 4 {
		<-done
	}
	d, _, n, ok := l.Estimate()
	require.True(t, ok)
	assert.Equal(t, uint64(4000), n)
	assert.Equal(t, time.Millisecond, d)
	assert.Zero(t, testing.AllocsPerRun(100, func() { l.Observe(t0, time.Millisecond) }))
}

func BenchmarkLatencyObserve(b *testing.B) {
	var l Latency
	now := t0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		l.Observe(now, time.Millisecond)
	}
}

func TestLatencyReset(t *testing.T) {
	var l Latency
	l.Observe(t0, 200*time.Millisecond)
	l.Reset(t0.Add(time.Second), time.Millisecond)
	d, at, _, ok := l.Estimate()
	require.True(t, ok)
	assert.Equal(t, time.Millisecond, d)
	assert.True(t, at.Equal(t0.Add(time.Second)))
	// A straggler right after weighs as little as any sample.
	l.Observe(t0.Add(time.Second+time.Millisecond), 200*time.Millisecond)
	d, _, _, _ = l.Estimate()
	assert.Less(t, d, 2*time.Millisecond)
}

// A node with no current estimate (none given, or none recent) is not
// judged, and the slow streak it had starts over: it is marked only after
// MarkAfter of slowness measured after the gap.
func TestDetectorRestartsTheStreakAfterAGap(t *testing.T) {
	c := newCluster(t, Settings{}, "a", "a", "b", "b", "c", "c")
	require.Empty(t, c.run(2*time.Second))
	c.lat["n2"] = 50 * time.Millisecond
	require.Empty(t, c.run(DefaultMarkAfter*3/4))

	lat := c.nodes[2].Latency
	c.nodes[2].Latency, c.lat["n2"] = nil, 0
	assert.Empty(t, c.run(DefaultMarkAfter), "marked without an estimate")

	c.nodes[2].Latency, c.lat["n2"] = lat, 50*time.Millisecond
	assert.Empty(t, c.run(DefaultMarkAfter/2), "the streak before the gap counted")
	ch := c.run(DefaultMarkAfter + 2*Decay)
	require.Len(t, ch, 1, "slow for MarkAfter after the gap, and not marked")
	assert.Equal(t, "n2", ch[0].ID)
	assert.True(t, ch[0].Marked)
}

// When every node turns slow, the first measured is not judged against
// peers whose estimates predate the slowdown.
func TestDetectorIgnoresStalePeers(t *testing.T) {
	d := NewDetector(Settings{})
	nodes := []Node{{ID: "a", Latency: &Latency{}}, {ID: "b", Latency: &Latency{}}, {ID: "c", Latency: &Latency{}}}
	now := t0
	for _, n := range nodes {
		n.Latency.Observe(now, time.Millisecond)
	}
	// From now on only a is measured: slow, like the others would be.
	var ch []Change
	for range 40 {
		now = now.Add(100 * time.Millisecond)
		nodes[0].Latency.Observe(now, 150*time.Millisecond)
		ch = append(ch, d.Evaluate(now, nodes)...)
	}
	assert.Empty(t, ch, "b and c were measured before the slowdown: no peers to judge a by")
}

// A marked node whose peers go unmeasured (every caller shed from it, or
// the traffic of the others gone quiet) cannot be judged: it keeps its mark
// until the mark expires, and is not taken to have recovered.
func TestDetectorKeepsAMarkWhileThePeersAreQuiet(t *testing.T) {
	c := newCluster(t, Settings{Ejection: time.Minute}, "a", "a", "b", "b", "c", "c")
	c.lat["n2"] = 50 * time.Millisecond
	require.NotEmpty(t, c.run(3*time.Second))
	require.Equal(t, []string{"n2"}, marked(c))

	for id := range c.lat {
		if id != "n2" {
			c.lat[id] = 0 // no traffic
		}
	}
	assert.Empty(t, c.run(5*time.Second), "a mark ended with no peers to judge by")
	assert.Equal(t, []string{"n2"}, marked(c))

	for id := range c.lat {
		if id != "n2" {
			c.lat[id] = time.Millisecond
		}
	}
	c.lat["n2"] = time.Millisecond
	ch := c.run(DefaultUnmarkAfter + 3*time.Second)
	require.Len(t, ch, 1, "recovered once its peers are measured again")
	assert.Equal(t, "recovered", ch[0].Reason)
}
