package redisguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// How the chaos soak (chaos_test.go) judges what its workload recorded, and
// the invariants report it prints.

// errClass is what the invariants make of an operation's outcome.
type errClass int

const (
	classOK       errClass = iota // success, or redis.Nil
	classGuard                    // ErrNodeUnavailable, ErrPoolExhausted, ErrClusterFailover, ErrSlotMapCorruption, ErrClosed
	classContext                  // the caller's context
	classReply                    // a Redis error reply other than a redirect
	classNet                      // a network error (allowed on a faulted node only)
	classRedirect                 // a raw MOVED or ASK: a violation
	classRefusal                  // a raw CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN or READONLY, not ridden out: a violation
	classUntyped                  // anything else: a violation
)

func classifyOutcome(err error) errClass {
	switch {
	case err == nil || err == redis.Nil:
		return classOK
	case errors.Is(err, ErrOutcomeUnknown):
		return classNet // the network failed a command that may have run: allowed on a faulted node only
	case isGuardError(err) || errors.Is(err, ErrClosed):
		return classGuard
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return classContext
	}
	if _, _, ok := redirectOf(err); ok {
		return classRedirect
	}
	if notServing(err) {
		return classRefusal
	}
	if isRedisReply(err) {
		return classReply
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed) {
		return classNet
	}
	return classUntyped
}

// record classifies one operation's outcome on shard, started at t0 with
// deadline dl.
func (w *chaosWorld) record(kind string, shard int, t0, dl time.Time, err error) {
	end := time.Now()
	class := classifyOutcome(err)
	// An error that names its node is that node's shard's: PUBLISH goes to
	// any node, and a key's shard is only where go-redis sent it first.
	var ne *NodeError
	if errors.As(err, &ne) {
		if s, ok := w.nodeOf[ne.Addr]; ok {
			shard = s
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops++
	over := end.Sub(dl)
	if over > chaosOverrun || class == classNet {
		// Judged at the end: a node that crashed by itself is found, and
		// its fault window opened, only after the fact.
		w.suspects = append(w.suspects, suspect{kind: kind, shard: shard, t0: t0, end: end, over: over, err: fmt.Sprint(err), net: class == classNet})
	}
	w.counts[kind+"/"+class.String()]++
	switch class {
	case classOK:
		w.ok++
		w.okBy[kind]++
	case classRedirect:
		w.redirects++
		w.sample("raw redirect: %s: %v", kind, err)
	case classRefusal:
		w.refusals++
		w.sample("raw refusal: %s: %v", kind, err)
	case classUntyped:
		w.untyped++
		w.sample("untyped: %s: %T %v", kind, err, err)
	case classReply:
		w.replies[replyKind(err)]++
	}
}

// replyKind is the first word of a Redis error reply (CLUSTERDOWN,
// READONLY, UNBLOCKED, ...), which names its kind.
func replyKind(err error) string {
	kind, _, _ := strings.Cut(err.Error(), " ")
	return kind
}

// suspect is an operation that is a violation unless a fault explains it.
type suspect struct {
	kind    string
	shard   int
	t0, end time.Time
	over    time.Duration // past the context deadline
	err     string
	net     bool // a network error
}

// judge sorts the suspects: a network error is the fault's when its shard
// was under a fault; an overrun is excused only on a node that crashed by
// itself (see chaosSchedule.settle), where CLIENT UNBLOCK cannot reach it.
func (w *chaosWorld) judge() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.suspects {
		at := s.t0.Format("15:04:05.000 ")
		if s.over > w.worstOverrun {
			w.worstOverrun = s.over
		}
		if s.over > chaosOverrun {
			switch {
			case w.faults.active(s.shard, s.t0, s.end, crashKind):
				w.overrunsCrashed++
			case s.over-w.stalls.within(s.end.Add(-s.over), s.end) <= chaosOverrun:
				// The process itself did not run for that long between
				// the deadline and the return (stallMeter).
				w.overrunsStalled++
			case s.over <= unblockGrace+chaosOverrun && strings.Contains(s.kind, "pop") &&
				w.faults.active(s.shard, s.t0, s.end, "graceful-failover", "pause-master", "slow-master", "blackhole"):
				// A blocking call whose context ends while its server
				// holds it and does not answer CLIENT UNBLOCK (a paused or
				// blackholed server; CLUSTER FAILOVER's write pause, which
				// postpones BLPOP, and may not let UNBLOCK end it) is cut
				// off unblockGrace after its cancellation (interrupt, in
				// dedicated.go). Reported, not failed.
				w.overrunsPaused++
			default:
				w.overruns++
				w.sample(at+"overrun %v: %s on shard %d: %s", s.over, s.kind, s.shard, s.err)
			}
		}
		if s.net {
			if w.faults.active(s.shard, s.t0, s.end) {
				w.netFaulted++
			} else {
				w.netHealthy++
				w.sample(at+"network error on healthy shard %d: %s: %s", s.shard, s.kind, s.err)
			}
		}
	}
	w.suspects = nil
}

// subscriberSlot is the resolution at which messages are noted: a few
// hundred bytes a minute, whatever the rate.
const subscriberSlot = 100 * time.Millisecond

// subscriberResume is how soon after a fault has healed the subscriber must
// receive again.
const subscriberResume = 2 * time.Second

func (w *chaosWorld) noteMessage(slots map[int64]bool, at time.Time) {
	w.subMu.Lock()
	slots[at.UnixNano()/int64(subscriberSlot)] = true
	w.subMu.Unlock()
}

// silentSubscriber lists the faults on the cluster after which the
// subscriber received nothing within subscriberResume although messages
// were published in that time: on the classic channel after any fault, on
// a shard channel after a fault on its shard. A fault followed by another
// within subscriberResume is left out: the next one may hold the
// subscriber up.
func (w *chaosWorld) silentSubscriber() []string {
	out := w.silentAfter("classic channel", w.pubAt, w.recvAt, func(int) bool { return true })
	for i, ch := range w.shardChannels {
		out = append(out, w.silentAfter("shard channel "+ch, w.shardPubAt[i], w.shardRecvAt[i],
			func(shard int) bool { return shard == i })...)
	}
	return out
}

func (w *chaosWorld) silentAfter(what string, pubAt, recvAt map[int64]bool, on func(shard int) bool) []string {
	w.faults.mu.Lock()
	wins := slices.Clone(w.faults.wins)
	w.faults.mu.Unlock()
	w.subMu.Lock()
	defer w.subMu.Unlock()
	noted := func(slots map[int64]bool, from, to time.Time) bool {
		for s := from.UnixNano() / int64(subscriberSlot); s <= to.UnixNano()/int64(subscriberSlot); s++ {
			if slots[s] {
				return true
			}
		}
		return false
	}
	var out []string
	for i, f := range wins {
		if f.shard == sideShard || f.end.IsZero() || !on(f.shard) {
			continue
		}
		until := f.end.Add(subscriberResume)
		followed := slices.ContainsFunc(wins, func(o faultWindow) bool {
			return o != wins[i] && o.shard != sideShard && o.start.Before(until) && (o.end.IsZero() || o.end.After(f.end))
		})
		if followed || !noted(pubAt, f.end, until.Add(-subscriberSlot)) || noted(recvAt, f.end, until) {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s on shard %d, healed %s", what, f.kind, f.shard, f.end.Format("15:04:05.000")))
	}
	return out
}

// sample keeps the first violations for the report. Called with mu held.
func (w *chaosWorld) sample(format string, args ...any) {
	if len(w.samples) < 20 {
		w.samples = append(w.samples, fmt.Sprintf(format, args...))
	}
}

func (c errClass) String() string {
	return [...]string{"ok", "guard", "context", "reply", "net", "redirect", "refusal", "untyped"}[c]
}

// chaosReport is the invariants report.
type chaosReport struct {
	seed                           uint64
	faultFor, faultTook, closeTook time.Duration
	faults                         []string
	ops, ok                        int
	okBy, counts, replies          map[string]int
	untyped, redirects, panics     int
	refusals                       int
	netHealthy, netFaulted         int
	overruns                       int
	worstOverrun                   time.Duration
	pushed, popped, dupPops, left  int
	strays                         int
	replayedPops                   int
	overrunsCrashed                int
	overrunsPaused                 int
	overrunsStalled                int
	worstStall                     time.Duration
	opens                          int
	falseOpens                     []string
	crashes                        int
	dups                           []string
	lost                           []string
	once                           onceVerdict
	reshards, asked                int
	received, published            int64
	shardReceived, shardPublished  int64
	healthyTrue, healthyFalse      int64
	healthyWorst                   time.Duration
	warmHeap, endHeap              uint64
	leak                           error
	conns                          []string
	samples                        string
}

func (w *chaosWorld) report() chaosReport {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := chaosReport{
		ops: w.ops, ok: w.ok, okBy: w.okBy, counts: w.counts, replies: w.replies,
		untyped: w.untyped, redirects: w.redirects, refusals: w.refusals, panics: int(w.panics.Load()),
		netHealthy: w.netHealthy, netFaulted: w.netFaulted,
		overruns: w.overruns, worstOverrun: w.worstOverrun, overrunsCrashed: w.overrunsCrashed, overrunsPaused: w.overrunsPaused,
		overrunsStalled: w.overrunsStalled, worstStall: w.stalls.worst(),
		received: w.received.Load(), published: w.published.Load(),
		shardReceived: w.shardReceived.Load(), shardPublished: w.shardPublished.Load(),
		healthyTrue: w.healthyTrue.Load(), healthyFalse: w.healthyFalse.Load(),
		healthyWorst: time.Duration(w.healthyWorst.Load()),
		samples:      strings.Join(w.samples, "\n    "),
	}
	w.popMu.Lock()
	for id, rec := range w.items {
		if rec.acked {
			r.pushed++
		}
		r.popped += int(rec.pops)
		switch {
		case rec.pops > 1 && rec.lossy:
			// A pop on a master that then lost its place to a replica
			// the pop had not reached yet: Redis's asynchronous
			// replication un-pops it. Reported, not failed.
			r.replayedPops++
		case rec.pops > 1:
			r.dupPops++
			if len(r.dups) < 10 {
				r.dups = append(r.dups, fmt.Sprintf("%d:%d popped %d times: pushed %s (acknowledged %v), popped %s and %s",
					id>>20, id&(1<<20-1), rec.pops, fmtMilli(rec.pushAt), rec.acked, fmtMilli(rec.popAt[0]), fmtMilli(rec.popAt[1])))
			}
		}
		if rec.pops > 0 && !rec.acked {
			r.strays++ // pushed, but its acknowledgement was lost: allowed
		}
	}
	w.popMu.Unlock()
	return r
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func (r chaosReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nchaos invariants report (seed %d; faults %v planned, %v taken)\n", r.seed, r.faultFor, r.faultTook.Round(time.Millisecond))
	b.WriteString("  faults:\n")
	for _, f := range r.faults {
		b.WriteString("    " + f + "\n")
	}
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString("  outcomes by op/class:\n   ")
	for i, k := range keys {
		if i > 0 && i%6 == 0 {
			b.WriteString("\n   ")
		}
		fmt.Fprintf(&b, " %s=%d", k, r.counts[k])
	}
	b.WriteString("\n  Redis error replies by kind:")
	for _, k := range slices.Sorted(maps.Keys(r.replies)) {
		fmt.Fprintf(&b, " %s=%d", k, r.replies[k])
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  [%s] errors typed: %d ops, %d ok; untyped %d, raw MOVED/ASK %d, raw refusals %d, panics %d; network errors %d on faulted nodes, %d on healthy ones\n",
		passFail(r.untyped+r.redirects+r.refusals+r.panics+r.netHealthy == 0), r.ops, r.ok, r.untyped, r.redirects, r.refusals, r.panics, r.netFaulted, r.netHealthy)
	fmt.Fprintf(&b, "  [%s] acknowledged values readable on keys no data-losing fault touched: %d lost\n", passFail(len(r.lost) == 0), len(r.lost))
	for i, l := range r.lost {
		if i == 5 {
			break
		}
		b.WriteString("      " + l + "\n")
	}
	fmt.Fprintf(&b, "  [%s] queue items popped at most once: %d acknowledged pushes, %d pops (incl. %d drained at the end, %d whose push ack was lost); %d popped twice; not counted: %d popped again after a lossy failover\n",
		passFail(r.dupPops == 0), r.pushed, r.popped, r.left, r.strays, r.dupPops, r.replayedPops)
	for _, d := range r.dups {
		b.WriteString("      " + d + "\n")
	}
	o := r.once
	fmt.Fprintf(&b, "  [%s] no unsafe command ran twice, by once-only counters: %d ops (%d autopipelined INCRs, %d scripted); %d ran twice\n",
		passFail(o.twice == 0), o.ops, o.auto, o.script, o.twice)
	fmt.Fprintf(&b, "  [%s] each once-only op ran as often as its caller was told: told it ran: %d ran once, %d never (not counted: %d on a shard a data-losing fault touched); outcome unknown: %d ran, %d did not; told it did not run: %d did not, %d did; %d never answered\n",
		passFail(o.lost+o.ranUntold+o.unanswered == 0), o.ranOnce, o.lost, o.lostLossy, o.maybeRan, o.maybeNot, o.notRun, o.ranUntold, o.unanswered)
	for _, v := range o.samples {
		b.WriteString("      " + v + "\n")
	}
	fmt.Fprintf(&b, "  [%s] slots resharded under load (MIGRATING/IMPORTING, MIGRATE in batches): %d, the importing masters asked %d times (ASKING)\n",
		passFail(r.reshards > 0 && r.asked > 0), r.reshards, r.asked)
	fmt.Fprintf(&b, "  [%s] no call outlived its context by more than %v: %d did; worst overrun %v (negative: none reached its deadline); not counted: %d on a node that crashed by itself (%d crashes), %d cancelled BLPOPs that a paused, blackholed or write-paused server held (each within %v), %d within the process's own stalls (worst stall %v)\n",
		passFail(r.overruns == 0), chaosOverrun, r.overruns, r.worstOverrun.Round(time.Millisecond), r.overrunsCrashed, r.crashes, r.overrunsPaused, unblockGrace+chaosOverrun,
		r.overrunsStalled, r.worstStall.Round(time.Millisecond))
	fmt.Fprintf(&b, "  [%s] goroutines back to the starting level after Close (goleak): %v\n", passFail(r.leak == nil), errOrNone(r.leak))
	fmt.Fprintf(&b, "  [%s] no connection named %s or %s left on any server after Close: %d left (Close took %v)\n",
		passFail(len(r.conns) == 0), chaosName, chaosSideName, len(r.conns), r.closeTook.Round(time.Millisecond))
	fmt.Fprintf(&b, "  [%s] heap bounded: %.1f MiB after warm-up, %.1f MiB after the run (x%.2f; limit x%d)\n",
		passFail(r.endHeap <= chaosHeap*r.warmHeap), float64(r.warmHeap)/(1<<20), float64(r.endHeap)/(1<<20), float64(r.endHeap)/float64(r.warmHeap), chaosHeap)
	fmt.Fprintf(&b, "  [%s] no redis-server crashed by itself: %d did (CLIENT UNBLOCK ... TIMEOUT on a postponed BLPOP once did; see TestBlockingCancelDuringWritePauseKeepsServerUp)\n",
		passFail(r.crashes == 0), r.crashes)
	fmt.Fprintf(&b, "  [%s] no breaker opened on a node no fault touched (a long-budget hog or a slot migration counts as none): %d of %d openings did\n",
		passFail(len(r.falseOpens) == 0), len(r.falseOpens), r.opens)
	for _, o := range r.falseOpens {
		b.WriteString("      " + o + "\n")
	}
	fmt.Fprintf(&b, "  subscriber: %d published, %d received; shard channels (one SSubscribe over every shard): %d published, %d received; Healthy: %d true, %d false, slowest %v\n",
		r.published, r.received, r.shardPublished, r.shardReceived, r.healthyTrue, r.healthyFalse, r.healthyWorst.Round(time.Millisecond))
	if r.samples != "" {
		b.WriteString("  violations (first 20):\n    " + r.samples + "\n")
	}
	return b.String()
}

func errOrNone(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// What the soak's judge makes of each kind of outcome: a refusal that says
// the server cannot serve now must have been ridden out, so one that
// reaches the caller raw is a violation, as a raw redirect is.
func TestChaosJudgeClassifies(t *testing.T) {
	node := &NodeError{Addr: "a:1", Err: ErrNodeUnavailable}
	for _, tt := range []struct {
		err  error
		want errClass
	}{
		{nil, classOK},
		{redis.Nil, classOK},
		{node, classGuard},
		{notServingError(redis.ErrCrossSlot), classGuard},
		{context.DeadlineExceeded, classContext},
		{redis.ErrCrossSlot, classReply},
		{redisErr("CLUSTERDOWN The cluster is down"), classRefusal},
		{redisErr("READONLY You can't write against a read only replica."), classRefusal},
		{redisErr("LOADING Redis is loading the dataset in memory"), classRefusal},
		{redisErr("MOVED 3999 127.0.0.1:6381"), classRedirect},
		{io.EOF, classNet},
		{errors.New("boom"), classUntyped},
	} {
		assert.Equal(t, tt.want, classifyOutcome(tt.err), "%v", tt.err)
	}
}
