package redisguard

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A command that still ends in MOVED or ASK after go-redis has spent its
// redirect budget was bounced between nodes: either the nodes disagree about
// who owns its slot (a promotion is propagating, or has gone wrong), or they
// agree and the loop came from the client's side. The raw redirect tells the
// caller neither, so it is never handed back. Instead the client asks a few
// nodes for their own view of the slot (decide, below, is the whole policy):
//
//   - The views disagree and the claimant with the highest configEpoch
//     answers: ownership is converging. Back off, refresh the map, retry;
//     raise ErrClusterFailover only if it has not settled within
//     ClusterNodeTimeout of the first cycle seen on the slot.
//   - The views disagree and that claimant does not answer: nobody will
//     serve the slot until the cluster acts. ErrClusterFailover at once.
//   - The views agree: the cluster is consistent, so the client's map is
//     not. ErrSlotMapCorruption, with a forced refresh; never a failover.
//
// Detection (redirectcycle.go) sits just inside the facade, on the final
// error of go-redis's redirect loop, because that is where a cycle has
// already cost the whole budget and the healthy path has already returned.
// A per-node hook would see each MOVED, but recognising A → B → A there
// needs per-command state, and a cycle that ends in an answer needs no
// decision anyway. The views come from slotview.go.
//
// Only commands for the affected slot wait or fail: the state is per slot,
// and nothing here runs for a command that did not hit a cycle.

// minDivergence is the least divergence assumed when backing off, so the
// first back-off (twice this) is short but not a spin.
const minDivergence = 20 * time.Millisecond

// verdict is what decide concluded.
type verdict uint8

const (
	converging verdict = iota + 1 // back off, refresh, retry
	failover                      // raise ErrClusterFailover
	corruption                    // raise ErrSlotMapCorruption
)

func (v verdict) String() string {
	switch v {
	case converging:
		return "converging"
	case failover:
		return "failover"
	case corruption:
		return "slot-map-corruption"
	}
	return "verdict(" + strconv.Itoa(int(v)) + ")"
}

// reason says why; it picks the wording of the error.
type reason uint8

const (
	viewsDisagree       reason = iota + 1 // converging: the top claimant answers
	viewsAgree                            // corruption
	claimantUnreachable                   // failover now
	notConverged                          // failover after ClusterNodeTimeout
	noViews                               // failover after ClusterNodeTimeout: nobody answered
)

// claimant is one distinct owner named by the views.
type claimant struct {
	id, addr  string
	epoch     uint64 // highest configEpoch any view gives it
	reachable bool   // any view found it answering
	votes     int    // views naming it
}

// decision is decide's result.
type decision struct {
	verdict   verdict
	reason    reason
	backoff   time.Duration // converging only: how long to wait before retrying
	elapsed   time.Duration // since the first cycle on the slot
	claimants []claimant    // distinct owners named, highest epoch first
}

// decide applies the policy above to the views gathered for one slot. It is
// pure: firstSeen is when a cycle was first seen on the slot, now is the
// present, and nodeTimeout is ClusterNodeTimeout. It never modifies views.
func decide(views []slotView, firstSeen, now time.Time, nodeTimeout time.Duration) decision {
	d := decision{elapsed: max(now.Sub(firstSeen), 0), claimants: claimantsOf(views)}
	expired := d.elapsed >= nodeTimeout
	switch {
	case len(views) == 0:
		// No evidence either way. Nodes that just bounced us are usually
		// back within moments, so this waits like a divergence; but a
		// disagreement was never seen, so it must not outlast one.
		d.verdict, d.reason = converging, noViews
		if expired {
			d.verdict = failover
		}
	case len(d.claimants) == 1:
		// One view cannot disagree with itself: with a single answer the
		// cluster looks consistent too, and a failover needs evidence.
		d.verdict, d.reason = corruption, viewsAgree
	case !topReachable(d.claimants):
		d.verdict, d.reason = failover, claimantUnreachable
	case expired:
		d.verdict, d.reason = failover, notConverged
	default:
		d.verdict, d.reason = converging, viewsDisagree
	}
	if d.verdict == converging {
		d.backoff = backoff(d.elapsed, nodeTimeout)
	}
	return d
}

// backoff is min(2 × observed divergence, nodeTimeout), and never past the
// end of nodeTimeout since the first observation: the last retry then lands
// on the deadline and the verdict after it is final. elapsed < nodeTimeout.
func backoff(elapsed, nodeTimeout time.Duration) time.Duration {
	div := max(elapsed, minDivergence)
	b := nodeTimeout
	if div < nodeTimeout/2 { // written so that 2×div cannot overflow
		b = 2 * div
	}
	return min(b, nodeTimeout-elapsed)
}

// expire turns a decision to keep waiting into the failover that is due
// once the wait is over.
func (dec decision) expire() decision {
	dec.verdict, dec.backoff = failover, 0
	if dec.reason != noViews {
		dec.reason = notConverged
	}
	return dec
}

// claimantsOf returns the distinct owners the views name, highest epoch
// first (ties by ID, so the order does not depend on the views' order).
func claimantsOf(views []slotView) []claimant {
	var out []claimant
	for _, v := range views {
		i := slices.IndexFunc(out, func(c claimant) bool { return c.id == v.owner })
		if i < 0 {
			out = append(out, claimant{id: v.owner, addr: v.ownerAddr})
			i = len(out) - 1
		}
		c := &out[i]
		c.votes++
		c.reachable = c.reachable || v.reachable
		c.epoch = max(c.epoch, v.epoch)
		if c.addr == "" {
			c.addr = v.ownerAddr
		}
	}
	slices.SortFunc(out, func(a, b claimant) int {
		if a.epoch != b.epoch {
			if a.epoch > b.epoch {
				return -1
			}
			return 1
		}
		return strings.Compare(a.id, b.id)
	})
	return out
}

// topReachable reports whether a claimant with the highest epoch answers.
// Equal epochs on different owners are a collision the cluster resolves by
// bumping one of them, so any of them answering means progress is possible.
// "No owner" is an opinion, not a claimant.
func topReachable(cs []claimant) bool {
	top, found := uint64(0), false
	for _, c := range cs {
		if c.id != "" && (!found || c.epoch > top) {
			top, found = c.epoch, true
		}
	}
	for _, c := range cs {
		if c.id != "" && c.epoch == top && c.reachable {
			return true
		}
	}
	return false
}

// err is the error a caller gets for a raise: the sentinel, the slot and
// the claimants, so that a log line or an alert says which nodes to look at.
func (dec decision) err(slot int, nodeTimeout time.Duration) error {
	cs := fmtClaimants(dec.claimants)
	switch {
	case dec.verdict == corruption:
		return fmt.Errorf("%w: slot %d: the nodes asked agree on its owner (%s), yet the client was redirected in a cycle; slot map refresh forced",
			ErrSlotMapCorruption, slot, cs)
	case dec.reason == claimantUnreachable:
		return fmt.Errorf("%w: slot %d: ownership contested and the claimant with the highest configEpoch does not answer; claimants: %s",
			ErrClusterFailover, slot, cs)
	case dec.reason == noViews:
		return fmt.Errorf("%w: slot %d: redirected in a cycle and no node answered about its owner within ClusterNodeTimeout (%s)",
			ErrClusterFailover, slot, nodeTimeout)
	default:
		return fmt.Errorf("%w: slot %d: ownership still contested %s after the first redirect cycle (ClusterNodeTimeout %s); claimants: %s",
			ErrClusterFailover, slot, dec.elapsed.Round(time.Millisecond), nodeTimeout, cs)
	}
}

// fmtViews renders views for a log line.
func fmtViews(views []slotView) string {
	if len(views) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, v := range views {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s says %s", v.from, fmtOwner(v.owner, v.ownerAddr))
		if v.owner != "" {
			fmt.Fprintf(&b, " epoch %d reachable=%t", v.epoch, v.reachable)
		}
	}
	return b.String()
}

// fmtClaimants renders claimants for an error or a log line.
func fmtClaimants(cs []claimant) string {
	if len(cs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(fmtOwner(c.id, c.addr))
		if c.id != "" {
			state := "reachable"
			if !c.reachable {
				state = "unreachable"
			}
			fmt.Fprintf(&b, " epoch %d %s", c.epoch, state)
		}
	}
	return b.String()
}

// fmtOwner names a node by address and short ID.
func fmtOwner(id, addr string) string {
	if id == "" {
		return "no owner"
	}
	return addr + " (" + id[:min(len(id), 8)] + ")"
}
