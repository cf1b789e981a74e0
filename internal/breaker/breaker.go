// Package breaker implements the per-node circuit breaker: after Threshold
// consecutive failures it fails calls fast until its owner, having probed the
// node out of band, calls Recover; it then lets traffic through again, and
// the first answer closes it while the first failure opens it again.
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
	DefaultThreshold = 5
	// MaxThreshold is the largest usable Threshold; larger values are
	// treated as MaxThreshold. The failure count shares a 64-bit word with
	// the state and generation, which leaves it 30 bits.
	MaxThreshold = 1<<failureBits - 1
)

// ErrOpen is returned by Allow while the breaker is open.
var ErrOpen = errors.New("breaker: open")

// Settings configures a Breaker. The zero Settings is a complete configuration.
type Settings struct {
	// Threshold is the number of consecutive failures that opens a closed
	// breaker. A negative Threshold disables the breaker: Allow always
	// succeeds, nothing is counted and the state stays Closed. Values above
	// MaxThreshold are treated as MaxThreshold.
	// default: DefaultThreshold (5)
	Threshold int

	// Clock tells the breaker the time, for LastTransition and OpenedAt.
	// The breaker never waits on it.
	// default: clock.Real()
	Clock clock.Clock

	// OnStateChange, if set, is called after every transition, outside the
	// breaker's lock, on the goroutine whose Done or Recover call caused it.
	// It must be quick: it delays that caller. It may call the breaker.
	// Callbacks for transitions that happen at nearly the same time may run
	// concurrently and out of order; Snapshot tells the current state.
	// default: nil
	OnStateChange func(from, to State)
}

// Ticket is the permission Allow grants for one call. Pass it to Done with the
// call's outcome. It is a small value: copying it costs nothing.
//
// A ticket carries the generation it was issued in. Every transition starts a
// new generation, so the result of a call that started before a transition,
// such as a call admitted while Closed that fails after the breaker opened,
// is dropped instead of being counted against the new state.
type Ticket struct {
	gen uint32
}

// Snapshot is a consistent view of a breaker at one instant.
type Snapshot struct {
	State State
	// ConsecutiveFailures is the current run of failures while Closed, and
	// zero in the other states.
	ConsecutiveFailures int
	// LastTransition is when the breaker last changed state, or when it was
	// created if it never has.
	LastTransition time.Time
	// OpenedAt is when the breaker last left Closed; zero if it never has.
	// A failure while HalfOpen reopens the breaker without moving it: the
	// node has been out since OpenedAt.
	OpenedAt time.Time
	// Opens counts transitions into Open, from Closed or from HalfOpen.
	Opens uint64
}

// Breaker is one node's circuit breaker. Create it with New. It is safe for
// concurrent use.
//
// An open breaker stays open until Recover is called: the breaker has no
// timers and never lets a caller's request through to find out whether the
// node is back. Its owner probes the node on its own connections, so that a
// probe never spends a caller's request, deadline or pooled connection.
//
// While Closed, Allow and a Success report touch only one atomic word and
// allocate nothing; the mutex is taken only on transitions.
type Breaker struct {
	// word packs state, consecutive failures and generation (see pack) so
	// that the hot path can read and update them with one atomic
	// operation. The state and generation change only with mu held. The
	// failure count changes without mu, by compare-and-swap, and only while
	// Closed; so writers holding mu must compare-and-swap a Closed word.
	word atomic.Uint64

	// Immutable after New.
	disabled  bool
	threshold uint32
	clock     clock.Clock
	onChange  func(from, to State)

	mu             sync.Mutex
	openedAt       time.Time // guarded by mu; when the breaker last left Closed
	lastTransition time.Time // guarded by mu
	opens          uint64    // guarded by mu
}

// New returns a Closed breaker configured by s. Zero fields take the defaults
// documented on Settings.
func New(s Settings) *Breaker {
	b := &Breaker{clock: s.Clock, onChange: s.OnStateChange}
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
	if b.clock == nil {
		b.clock = clock.Real()
	}
	b.lastTransition = b.clock.Now()
	b.word.Store(pack(Closed, 0, firstGen))
	return b
}

// Allow asks to make a call. It returns ErrOpen while the breaker is open;
// otherwise the caller must report the call's outcome with Done.
func (b *Breaker) Allow() (Ticket, error) {
	if b.disabled {
		return Ticket{}, nil
	}
	w := b.word.Load()
	if stateOf(w) == Open {
		return Ticket{}, ErrOpen
	}
	return Ticket{gen: genOf(w)}, nil
}

// Done reports the outcome of a call that Allow let through. Report each
// ticket once. Results from an earlier generation are dropped.
func (b *Breaker) Done(t Ticket, o Outcome) {
	if o == Success {
		b.Succeeded(t)
		return
	}
	b.done(t, o)
}

// Succeeded is Done(t, Success). Its common case, a Closed breaker of t's
// generation with no failure counted, changes nothing: Succeeded decides it
// with one read, and is small enough to be inlined into its caller.
func (b *Breaker) Succeeded(t Ticket) {
	if b.word.Load() != closedWord(t.gen) {
		b.done(t, Success) // a disabled breaker's tickets never match: see firstGen
	}
}

func (b *Breaker) done(t Ticket, o Outcome) {
	if b.disabled {
		return
	}
	switch o {
	case Success:
		b.success(t)
	case Failure:
		b.failure(t)
	}
	// Neutral changes nothing in any state.
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
			b.move(w, Closed)
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
			} else if b.move(w, Open) {
				return
			}
		case HalfOpen:
			// The node passed its probe but failed real traffic: it is not
			// back after all, and one failure is enough to say so.
			b.move(w, Open)
			return
		default:
			return
		}
	}
}

// Recover moves an open breaker to HalfOpen, after its owner saw the node
// answer. Every call is let through again; the first one the node answers
// closes the breaker and the first failure opens it again. It reports
// whether the breaker was open.
func (b *Breaker) Recover() bool {
	if b.disabled {
		return false
	}
	w := b.word.Load()
	return stateOf(w) == Open && b.move(w, HalfOpen)
}

// Confirm closes a half-open breaker, as the first answered call would: its
// owner has seen the node answer a second probe and no call has come to
// close it. It reports whether the breaker was half-open.
func (b *Breaker) Confirm() bool {
	if b.disabled {
		return false
	}
	w := b.word.Load()
	return stateOf(w) == HalfOpen && b.move(w, Closed)
}

// Trip opens the breaker at once, from Closed or HalfOpen, whatever its
// failure count: for an owner that has seen the node fail in a way no
// single call reports, such as a node that has answered nothing for a long
// while. Results of calls admitted before are dropped, as after any
// transition. It reports whether the breaker opened.
func (b *Breaker) Trip() bool {
	if b.disabled {
		return false
	}
	for {
		w := b.word.Load()
		if stateOf(w) == Open {
			return false
		}
		if b.move(w, Open) {
			return true
		}
	}
}

// move changes the state from the one in w to s, starting a new generation,
// if the word is still w: no other transition, success or failure slipped in
// since the caller read it. It reports false otherwise, so the caller re-reads
// and decides again.
func (b *Breaker) move(w uint64, s State) bool {
	b.mu.Lock()
	if !b.word.CompareAndSwap(w, pack(s, 0, nextGen(genOf(w)))) {
		b.mu.Unlock()
		return false
	}
	from := stateOf(w)
	now := b.clock.Now()
	b.lastTransition = now
	if s == Open {
		b.opens++
		if from == Closed {
			b.openedAt = now
		}
	}
	b.mu.Unlock()
	if b.onChange != nil {
		b.onChange(from, s)
	}
	return true
}

// State returns the breaker's current state.
func (b *Breaker) State() State {
	if b.disabled {
		return Closed
	}
	return stateOf(b.word.Load())
}

// Snapshot returns a consistent view of the breaker.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.word.Load()
	return Snapshot{
		State:               stateOf(w),
		ConsecutiveFailures: int(failuresOf(w)),
		LastTransition:      b.lastTransition,
		OpenedAt:            b.openedAt,
		Opens:               b.opens,
	}
}
