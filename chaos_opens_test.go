package redisguard

import (
	"fmt"
	"sync"
	"time"
)

// breakerOpens records every breaker opening the soak's clients report, so
// that the judge can tell an opening a fault explains from one on a node
// no fault touched (a false opening).
type breakerOpens struct {
	mu    sync.Mutex
	opens []Event // guarded by mu
}

func (b *breakerOpens) onEvent(e Event) {
	if e.Kind != EventBreakerOpened {
		return
	}
	b.mu.Lock()
	b.opens = append(b.opens, e)
	b.mu.Unlock()
}

// openingKinds are the faults that may open a breaker of their shard's
// nodes: those that stop a server, break its connections or slow it. A
// long blocking call holding the long budget, and a slot migrating, must
// open none.
var openingKinds = []string{"pause-master", "kill-replica", "client-kill", "graceful-failover", "takeover-failover", "blackhole", "slow-master", crashKind}

// falseOpens returns the openings on nodes that no opening fault touched
// (within faultGrace of its end), described for the report, and how many
// openings there were in all. side is the address the side client dials.
func (w *chaosWorld) falseOpens(b *breakerOpens, side string) (bad []string, all int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.opens {
		shard, ok := w.nodeOf[e.Addr]
		if e.Addr == side {
			shard, ok = sideShard, true
		}
		if ok && w.faults.active(shard, e.Time, e.Time, openingKinds...) {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s breaker of %s (shard %d) opened (%s, after %v of silence)",
			e.Time.Format("15:04:05.000"), e.Addr, shard, e.Decision, e.Duration.Round(time.Millisecond)))
	}
	return bad, len(b.opens)
}
