// Package breaker implements the per-node circuit breaker: after Threshold
// consecutive failures it fails calls fast for RecoveryTime, then lets a single
// probe through to decide whether to close again.
package breaker

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redisguard/redisguard/internal/clock"
)

// Defaults used when a Settings field is left zero, and the limit on Threshold.
const (
	DefaultThreshold    = 5
	DefaultRecoveryTime = 10 * time.Second
	// MaxThreshold is the largest usable Threshold; larger values are
	// treated as MaxThreshold. The failure count shares a 64-bit word with
	// the state and generation, which leaves it 30 bits.
	MaxThreshold = 1<<failureBits - 1
)

// ErrOpen is returned by Allow when the breaker rejects a call, either because
// it is open or because it is half-open and its one probe is in flight.
var ErrOpen = errors.New("breaker: open")

// Settings configures a Breaker. The zero Settings is a complete configuration.
type Settings struct {
	// Threshold is the number of consecutive failures that opens a closed
	// breaker. A negative Threshold disables the breaker: Allow always
	// succeeds, nothing is counted and the state stays Closed. Values above
	// MaxThreshold are treated as MaxThreshold.
	// default: DefaultThreshold (5)
	Threshold int

	// RecoveryTime is how long an open breaker fails calls fast before it
	// lets a probe through. Negative values are treated as zero.
	// default: DefaultRecoveryTime (10s)
	RecoveryTime time.Duration

	// ProbeTimeout is how long a probe may stay in flight without reporting
	// before another caller may probe, so that a lost probe cannot keep the
	// breaker half-open forever. Set it to the longest an ordinary call can
	// take: a probe replaced while it is still waiting for its timeout would
	// have its failure dropped, and a breaker whose every probe is replaced
	// just before it fails never opens again.
	// default: RecoveryTime
	ProbeTimeout time.Duration

	// Clock tells the breaker the time. The breaker never waits on it: it
	// reads it lazily on the calls that may change state.
	// default: clock.Real()
	Clock clock.Clock

	// OnStateChange, if set, is called after every transition, outside the
	// breaker's lock, on the goroutine whose Allow, Done, State or Snapshot
	// call caused it. It must be quick: it delays that caller. It may call
	// the breaker. Callbacks for transitions that happen at nearly the same
	// time may run concurrently and out of order; Snapshot tells the current
	// state.
	// default: nil
	OnStateChange func(from, to State)
}

// Ticket is the permission Allow grants for one call. Pass it to Done with the
// call's outcome. It is a small value: copying it costs nothing.
//
// A ticket carries the generation it was issued in. Every transition starts a
// new generation, so the result of a call that started before a transition,
// or of a probe that was given up on, is dropped instead of being counted
// against the new state.
type Ticket struct {
	gen   uint32
	probe bool
}

// Probe reports whether the ticket is the half-open probe, whose outcome
// decides whether the breaker closes or opens again.
func (t Ticket) Probe() bool { return t.probe }

// Snapshot is a consistent view of a breaker at one instant.
type Snapshot struct {
	State State
	// ConsecutiveFailures is the current run of failures while Closed, and
	// zero in the other states.
	ConsecutiveFailures int
	// LastTransition is when the breaker last changed state, or when it was
	// created if it never has.
	LastTransition time.Time
	// Opens counts transitions into Open, from Closed or from a failed probe.
	Opens uint64
	// ProbeInFlight reports whether a half-open probe has been let through
	// and has neither reported nor been given up on.
	ProbeInFlight bool
}

// Breaker is one node's circuit breaker. Create it with New. It is safe for
// concurrent use.
//
// While Closed, Allow and a Success report touch only one atomic word and
// allocate nothing; the mutex is taken only on the paths that may change
// state or that run while the breaker is not Closed.
type Breaker struct {
	// word packs state, consecutive failures and generation (see pack) so
	// that the closed path can read and update them with one atomic
	// operation. The state and generation change only with mu held. The
	// failure count changes without mu, by compare-and-swap, and only while
	// Closed; so writers holding mu may Store over a word that is not Closed,
	// but must compare-and-swap a Closed one.
	word atomic.Uint64

	// rejectUntil is a unix-nanosecond time before which a breaker that is
	// not Closed certainly rejects: the end of the recovery time while Open,
	// or of the probe's grace while a probe is in flight. It lets the many
	// callers that hit an open breaker fail fast with an atomic load instead
	// of queueing on mu. Written only with mu held; 0 when nothing is certain.
	rejectUntil atomic.Int64

	// Immutable after New.
	disabled  bool
	threshold uint32
	recovery  time.Duration
	probeMax  time.Duration // ProbeTimeout
	clock     clock.Clock
	onChange  func(from, to State)

	mu             sync.Mutex
	openedAt       time.Time // guarded by mu; when the breaker last entered Open
	probing        bool      // guarded by mu; a probe is in flight
	probeStart     time.Time // guarded by mu; when the probe in flight was let through
	lastTransition time.Time // guarded by mu
	opens          uint64    // guarded by mu
}

// New returns a Closed breaker configured by s. Zero fields take the defaults
// documented on Settings.
func New(s Settings) *Breaker {
	b := &Breaker{
		recovery: s.RecoveryTime,
		clock:    s.Clock,
		onChange: s.OnStateChange,
	}
	switch {
	case s.Threshold < 0:
		b.disabled = true
	case s.Threshold == 0:
		b.threshold = DefaultThreshold
	case s.Threshold > MaxThreshold:
		b.threshold = MaxThreshold
	default:
		b.threshold = uint32(s.Threshold)
	}
	if b.recovery <= 0 {
		b.recovery = DefaultRecoveryTime
	}
	b.probeMax = s.ProbeTimeout
	if b.probeMax <= 0 {
		b.probeMax = b.recovery
	}
	if b.clock == nil {
		b.clock = clock.Real()
	}
	b.lastTransition = b.clock.Now()
	b.word.Store(pack(Closed, 0, firstGen))
	return b
}

// Allow asks to make a call. It returns ErrOpen if the breaker rejects it;
// otherwise the caller must report the call's outcome with Done.
func (b *Breaker) Allow() (Ticket, error) {
	if b.disabled {
		return Ticket{}, nil
	}
	if w := b.word.Load(); stateOf(w) == Closed {
		return Ticket{gen: genOf(w)}, nil
	}
	if b.clock.Now().UnixNano() < b.rejectUntil.Load() {
		return Ticket{}, ErrOpen
	}
	return b.allowSlow()
}

func (b *Breaker) allowSlow() (Ticket, error) {
	b.mu.Lock()
	now := b.clock.Now()
	tr := b.advanceLocked(now)
	var (
		t   Ticket
		err error
	)
	switch w := b.word.Load(); stateOf(w) {
	case Closed:
		// Another caller's probe closed the breaker since our first look.
		t = Ticket{gen: genOf(w)}
	case Open:
		err = ErrOpen
	case HalfOpen:
		if b.probing && now.Sub(b.probeStart) < b.probeMax {
			err = ErrOpen
			break
		}
		// Either no probe is in flight, or the one in flight has been out
		// so long that we assume its result is lost. A new generation makes
		// sure that result is dropped if it turns up after all.
		g := nextGen(genOf(w))
		b.word.Store(pack(HalfOpen, 0, g))
		b.probing = true
		b.probeStart = now
		b.rejectUntil.Store(now.Add(b.probeMax).UnixNano())
		t = Ticket{gen: g, probe: true}
	}
	b.mu.Unlock()
	b.notify(tr)
	return t, err
}

// Done reports the outcome of a call that Allow let through. Report each
// ticket once: a second report on a probe ticket is ignored, but one on an
// ordinary ticket counts again. Results from an earlier generation, such as a
// call admitted while Closed that finishes after the breaker opened, are
// dropped.
func (b *Breaker) Done(t Ticket, o Outcome) {
	if b.disabled {
		return
	}
	switch o {
	case Success:
		b.success(t)
	case Failure:
		b.failure(t)
	default:
		// Neutral changes nothing while Closed; it only hands back a probe.
		if w := b.word.Load(); genOf(w) == t.gen && stateOf(w) == HalfOpen {
			b.finishProbe(t, Neutral)
		}
	}
}

func (b *Breaker) success(t Ticket) {
	for {
		w := b.word.Load()
		if genOf(w) != t.gen {
			return
		}
		switch stateOf(w) {
		case Closed:
			// Skipping the write when the count is already zero keeps the
			// common case read-only, so parallel callers do not fight over
			// the cache line.
			if failuresOf(w) == 0 || b.word.CompareAndSwap(w, pack(Closed, 0, t.gen)) {
				return
			}
		case HalfOpen:
			b.finishProbe(t, Success)
			return
		default:
			return
		}
	}
}

func (b *Breaker) failure(t Ticket) {
	for {
		w := b.word.Load()
		if genOf(w) != t.gen {
			return
		}
		switch stateOf(w) {
		case Closed:
			if n := failuresOf(w) + 1; n < b.threshold {
				if b.word.CompareAndSwap(w, pack(Closed, n, t.gen)) {
					return
				}
			} else if b.trip(w) {
				return
			}
		case HalfOpen:
			b.finishProbe(t, Failure)
			return
		default:
			return
		}
	}
}

// trip opens a Closed breaker whose word is still w, meaning no success or
// other failure slipped in since the caller counted the last failure. It
// reports false if w changed, so the caller re-reads and tries again.
func (b *Breaker) trip(w uint64) bool {
	b.mu.Lock()
	if !b.word.CompareAndSwap(w, pack(Open, 0, nextGen(genOf(w)))) {
		b.mu.Unlock()
		return false
	}
	now := b.clock.Now()
	b.openedAt = now
	b.lastTransition = now
	b.opens++
	b.rejectUntil.Store(now.Add(b.recovery).UnixNano())
	b.mu.Unlock()
	b.notify(transition{from: Closed, to: Open})
	return true
}

// finishProbe applies the outcome of the probe holding ticket t, if t is
// still the current probe.
func (b *Breaker) finishProbe(t Ticket, o Outcome) {
	b.mu.Lock()
	w := b.word.Load()
	if genOf(w) != t.gen || stateOf(w) != HalfOpen {
		b.mu.Unlock()
		return
	}
	b.probing = false
	b.rejectUntil.Store(0)
	g := nextGen(genOf(w))
	var tr transition
	switch o {
	case Success:
		b.word.Store(pack(Closed, 0, g))
		b.lastTransition = b.clock.Now()
		tr = transition{from: HalfOpen, to: Closed}
	case Failure:
		// The recovery time restarts from the failed probe, not from the
		// original opening: the node has just shown it is still down.
		now := b.clock.Now()
		b.word.Store(pack(Open, 0, g))
		b.openedAt = now
		b.lastTransition = now
		b.opens++
		b.rejectUntil.Store(now.Add(b.recovery).UnixNano())
		tr = transition{from: HalfOpen, to: Open}
	default:
		// Stay half-open and free the slot for the next caller. The new
		// generation makes a repeated report on this ticket a no-op.
		b.word.Store(pack(HalfOpen, 0, g))
	}
	b.mu.Unlock()
	b.notify(tr)
}

// State returns the breaker's current state. An open breaker whose recovery
// time has passed becomes half-open here, as it would on Allow.
func (b *Breaker) State() State {
	if b.disabled {
		return Closed
	}
	if s := stateOf(b.word.Load()); s != Open {
		return s
	}
	b.mu.Lock()
	tr := b.advanceLocked(b.clock.Now())
	s := stateOf(b.word.Load())
	b.mu.Unlock()
	b.notify(tr)
	return s
}

// Snapshot returns a consistent view of the breaker, applying a due
// transition from Open to HalfOpen first.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	var tr transition
	if !b.disabled {
		tr = b.advanceLocked(b.clock.Now())
	}
	w := b.word.Load()
	s := Snapshot{
		State:               stateOf(w),
		ConsecutiveFailures: int(failuresOf(w)),
		LastTransition:      b.lastTransition,
		Opens:               b.opens,
		ProbeInFlight:       b.probing,
	}
	b.mu.Unlock()
	b.notify(tr)
	return s
}

// advanceLocked moves an Open breaker whose recovery time has passed to
// HalfOpen. Doing it on read, instead of with a timer, means an idle breaker
// costs nothing and needs no goroutine to stop. b.mu must be held.
func (b *Breaker) advanceLocked(now time.Time) transition {
	w := b.word.Load()
	if stateOf(w) != Open || now.Sub(b.openedAt) < b.recovery {
		return transition{}
	}
	b.word.Store(pack(HalfOpen, 0, nextGen(genOf(w))))
	b.probing = false
	b.lastTransition = now
	return transition{from: Open, to: HalfOpen}
}

// transition is a state change to report to OnStateChange once the lock is
// released. The zero value, Closed to Closed, means there is none.
type transition struct{ from, to State }

func (b *Breaker) notify(tr transition) {
	if tr.from != tr.to && b.onChange != nil {
		b.onChange(tr.from, tr.to)
	}
}
