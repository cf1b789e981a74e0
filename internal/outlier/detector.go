package outlier

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"
)

// Defaults of Settings.
const (
	DefaultFactor      = 4.0
	DefaultFloor       = 5 * time.Millisecond
	DefaultMarkAfter   = time.Second
	DefaultUnmarkAfter = 2 * time.Second
	DefaultEjection    = 5 * time.Second
	DefaultMaxEjection = 30 * time.Second
	DefaultStale       = 5 * time.Second
	DefaultPeerStale   = time.Second
	DefaultMinSamples  = 5
)

// Settings configure a Detector. Zero fields take their defaults.
type Settings struct {
	// Factor and Floor say what slow is: a latency above Factor times the
	// median of the peers' latencies, and above Floor.
	Factor float64
	Floor  time.Duration
	// MarkAfter is how long a node must stay slow, with at least MinSamples
	// samples meanwhile, before it is marked.
	MarkAfter  time.Duration
	MinSamples uint64
	// UnmarkAfter is how long a marked node must stay fast to lose its mark
	// before the mark expires.
	UnmarkAfter time.Duration
	// Ejection is how long a mark lasts at most. A node marked again within
	// MaxEjection of its last mark ending gets twice its last mark's time,
	// up to MaxEjection.
	Ejection    time.Duration
	MaxEjection time.Duration
	// Stale is how old a node's last sample may be for the node to be
	// judged; PeerStale, for it to count as a peer. A peer's estimate must
	// be recent: when every node turns slow, the first one measured must
	// not be judged against peers whose estimates are from before.
	Stale     time.Duration
	PeerStale time.Duration
}

func (s Settings) withDefaults() Settings {
	if s.Factor <= 0 {
		s.Factor = DefaultFactor
	}
	if s.Floor <= 0 {
		s.Floor = DefaultFloor
	}
	if s.MarkAfter <= 0 {
		s.MarkAfter = DefaultMarkAfter
	}
	if s.MinSamples == 0 {
		s.MinSamples = DefaultMinSamples
	}
	if s.UnmarkAfter <= 0 {
		s.UnmarkAfter = DefaultUnmarkAfter
	}
	if s.Ejection <= 0 {
		s.Ejection = DefaultEjection
	}
	if s.MaxEjection <= 0 {
		s.MaxEjection = DefaultMaxEjection
	}
	if s.MaxEjection < s.Ejection {
		s.MaxEjection = s.Ejection
	}
	if s.Stale <= 0 {
		s.Stale = DefaultStale
	}
	if s.PeerStale <= 0 {
		s.PeerStale = DefaultPeerStale
	}
	return s
}

// MinPeers is how many recently measured peers a node is judged against.
// With one, a node only twice as loaded as the other would look slow; a
// median of two or more is what "slower than its peers" needs.
const MinPeers = 2

// Node is one node as the detector sees it at an evaluation.
type Node struct {
	ID string
	// Group is the node's shard: at most one node of a group is marked at
	// a time. An empty Group is a group of its own.
	Group string
	// Latency is the node's estimate; nil when it has none that says how
	// the node answers now. A node without one is not judged, is no peer,
	// and its slow streak starts over.
	Latency *Latency
	// Out says the node serves nothing now (its breaker is open): it is
	// not marked, and it counts with the marked toward the half of the
	// nodes that are never out of service at once.
	Out bool
}

// Change is a node gaining or losing its mark.
type Change struct {
	ID      string
	Marked  bool
	Reason  string        // "slow", "recovered" (fast again) or "expired"
	Latency time.Duration // the node's estimate at the change
	Peers   time.Duration // the median of its peers' estimates; 0 if none
	Until   time.Time     // when a new mark expires
}

// Detector marks the slow outliers among a set of nodes. It is safe for
// concurrent use, though one evaluation at a time is what makes sense.
type Detector struct {
	s Settings

	mu    sync.Mutex
	state map[string]*nodeState // guarded by mu
}

type nodeState struct {
	slowSince    time.Time // when it last became slow; zero while it is not
	samplesAt    uint64    // its sample count then
	fastSince    time.Time // when it last became fast; zero while it is not
	marked       bool
	until        time.Time // when the mark expires
	level        uint      // doublings of Ejection for the next mark
	lastUnmarked time.Time
	quietUntil   time.Time // not marked again before: its first answers after a mark are no verdict
	// refEst is the node's estimate, and refAt the time of its last sample,
	// as of an evaluation at least recentSpan of samples ago: with the
	// estimate now they give the mean of the samples since (recentMean).
	refEst time.Duration
	refAt  time.Time
}

// recentSpan is the least span of samples recentMean is taken over.
const recentSpan = Decay / 4

// recentMean returns the mean of the samples a Latency took between two of
// its estimates: e0, whose last sample was at a0, and e1, at a1 after a0.
// Each sample moves the estimate toward itself by its time since the one
// before, so over the span the old estimate keeps about exp(-(a1-a0)/Decay)
// of its weight, and the samples between have the rest. Samples far apart
// keep the old estimate more weight than that (Observe's weight exceeds the
// exponential's), so the mean errs toward e0: toward slow for a node that
// recovers, which leaves it to the estimate alone.
func recentMean(e0 time.Duration, a0 time.Time, e1 time.Duration, a1 time.Time) time.Duration {
	w := math.Exp(-float64(a1.Sub(a0)) / float64(Decay))
	return time.Duration((float64(e1) - w*float64(e0)) / (1 - w))
}

// NewDetector returns a Detector with settings s.
func NewDetector(s Settings) *Detector {
	return &Detector{s: s.withDefaults(), state: make(map[string]*nodeState)}
}

// Marked reports whether id carries a mark.
func (d *Detector) Marked(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	st, ok := d.state[id]
	return ok && st.marked
}

// Evaluate judges nodes at now and returns the marks it gave and took.
// Nodes absent from the list are forgotten, marks included.
func (d *Detector) Evaluate(now time.Time, nodes []Node) []Change {
	d.mu.Lock()
	defer d.mu.Unlock()

	type judged struct {
		n     Node
		st    *nodeState
		est   time.Duration
		fresh bool      // recent enough to be judged
		peer  bool      // recent enough to count as a peer
		at    time.Time // of its last sample
		slow  bool
		// fastNow: the mean of its samples since its reference (recentMean)
		// is not slow, though its estimate, which lags by a few Decay, may
		// still be. A node that has recovered is not marked on its past.
		fastNow bool
		peers   time.Duration
		samples uint64
		// judged: it was fresh and had enough peers this time. Only a
		// judged node can be found to have recovered; one whose peers went
		// quiet keeps its mark until it expires.
		judged bool
	}
	all := make([]judged, 0, len(nodes))
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		if seen[n.ID] {
			continue
		}
		seen[n.ID] = true
		st := d.state[n.ID]
		if st == nil {
			st = &nodeState{}
			d.state[n.ID] = st
		}
		j := judged{n: n, st: st}
		if n.Latency != nil {
			if est, at, samples, ok := n.Latency.Estimate(); ok && now.Sub(at) < d.s.Stale {
				j.est, j.at, j.fresh, j.samples = est, at, true, samples
				j.peer = now.Sub(at) < d.s.PeerStale
			}
		}
		all = append(all, j)
	}
	for id := range d.state {
		if !seen[id] {
			delete(d.state, id)
		}
	}

	// Slow: far above the median of the other recently measured nodes. When
	// every node is slow, the median is slow too, and none is.
	peers := make([]time.Duration, 0, len(all))
	for _, j := range all {
		if j.peer {
			peers = append(peers, j.est)
		}
	}
	for i := range all {
		j := &all[i]
		others := len(peers)
		if j.peer {
			others--
		}
		if !j.fresh {
			// Its estimate is not current: a slow streak needs one that
			// is, and starts over once the node is measured again.
			j.st.slowSince = time.Time{}
			continue
		}
		if others < MinPeers {
			continue
		}
		j.judged = true
		if j.peer {
			j.peers = medianWithout(peers, j.est)
		} else {
			j.peers = medianWithout(append(peers, j.est), j.est)
		}
		j.slow = d.isSlow(j.est, j.peers)
		st := j.st
		if span := j.at.Sub(st.refAt); st.refAt.IsZero() || span >= recentSpan {
			if !st.refAt.IsZero() {
				j.fastNow = !d.isSlow(recentMean(st.refEst, st.refAt, j.est, j.at), j.peers)
			}
			st.refEst, st.refAt = j.est, j.at
		}
		if j.slow {
			if st.slowSince.IsZero() {
				st.slowSince, st.samplesAt = now, j.samples
			}
			st.fastSince = time.Time{}
		} else {
			st.slowSince = time.Time{}
			if st.fastSince.IsZero() {
				st.fastSince = now
			}
		}
	}

	var changes []Change
	marked := 0
	markedGroups := map[string]bool{}
	for i := range all {
		j := &all[i]
		st := j.st
		if !st.marked {
			continue
		}
		reason := ""
		switch {
		case !now.Before(st.until):
			reason = "expired"
		case j.judged && !j.slow && now.Sub(st.fastSince) >= d.s.UnmarkAfter:
			reason = "recovered"
		}
		if reason != "" {
			st.marked, st.lastUnmarked = false, now
			// The answers right after a mark ends are skewed (a pool to
			// warm again, callers that were refused all arriving at once):
			// a node still slow is marked again after twice MarkAfter.
			st.quietUntil = now.Add(2 * d.s.MarkAfter)
			st.slowSince = time.Time{} // a node must be slow anew for MarkAfter to be marked again
			changes = append(changes, Change{ID: j.n.ID, Reason: reason, Latency: j.est, Peers: j.peers})
			continue
		}
		marked++
		if j.n.Group != "" {
			markedGroups[j.n.Group] = true
		}
	}

	for _, j := range all {
		if j.n.Out && !j.st.marked {
			marked++
		}
	}

	// Mark the worst first, never a second node of a group, and never half
	// of the nodes, those out counted.
	slices.SortFunc(all, func(a, b judged) int { return cmp.Compare(b.est, a.est) })
	for i := range all {
		j := &all[i]
		st := j.st
		if st.marked || j.n.Out || !j.slow || j.fastNow || st.slowSince.IsZero() || now.Sub(st.slowSince) < d.s.MarkAfter || j.samples-st.samplesAt < d.s.MinSamples ||
			now.Before(st.quietUntil) {
			continue
		}
		if (j.n.Group != "" && markedGroups[j.n.Group]) || 2*(marked+1) >= len(all) {
			continue
		}
		if !st.lastUnmarked.IsZero() && now.Sub(st.lastUnmarked) < d.s.MaxEjection {
			st.level++
		} else {
			st.level = 0
		}
		dur := d.s.MaxEjection
		if st.level < 16 {
			dur = min(d.s.Ejection<<st.level, d.s.MaxEjection)
		}
		st.marked, st.until = true, now.Add(dur)
		marked++
		if j.n.Group != "" {
			markedGroups[j.n.Group] = true
		}
		changes = append(changes, Change{ID: j.n.ID, Marked: true, Reason: "slow", Latency: j.est, Peers: j.peers, Until: st.until})
	}
	return changes
}

// isSlow reports whether latency est is slow beside peers, their median.
func (d *Detector) isSlow(est, peers time.Duration) bool {
	return float64(est) > d.s.Factor*float64(peers) && est > d.s.Floor
}

// medianWithout returns the median of xs with one occurrence of self left
// out.
func medianWithout(xs []time.Duration, self time.Duration) time.Duration {
	others := make([]time.Duration, 0, len(xs))
	skipped := false
	for _, x := range xs {
		if !skipped && x == self {
			skipped = true
			continue
		}
		others = append(others, x)
	}
	if len(others) == 0 {
		return 0
	}
	slices.Sort(others)
	m := len(others) / 2
	if len(others)%2 == 0 {
		return (others[m-1] + others[m]) / 2
	}
	return others[m]
}
