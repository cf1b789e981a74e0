package breaker

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Defaults of ScheduleSettings.
const (
	DefaultFirstProbe = 100 * time.Millisecond
	DefaultMaxProbe   = 10 * time.Second
)

// ScheduleSettings configures a Schedule. The zero value is complete.
type ScheduleSettings struct {
	// First is the delay before the first probe of a node whose breaker
	// has just opened, and the least delay between two probes.
	// default: DefaultFirstProbe (100ms)
	First time.Duration
	// Max is the longest delay between two probes.
	// default: DefaultMaxProbe (10s)
	Max time.Duration
	// Stable is how long a node must stay closed for its next opening to
	// start again from First. A node that opens again sooner is flapping:
	// each such opening doubles the least delay, up to Max. A node that
	// came back from refusing connections (a restart) is not: its next
	// opening starts from First too, as a server restarted again is found
	// by a restart's cheap probes.
	// default: Max
	Stable time.Duration
	// Jitter returns a number in [0, 1); every delay is scaled by a factor
	// between 0.8 and 1.2 drawn from it, so that clients started together
	// do not probe in step.
	// default: math/rand/v2.Float64
	Jitter func() float64
}

// Schedule decides when the owner of a breaker probes its node while the
// breaker is open. It is safe for concurrent use; it reads no clock of its
// own: every method takes the time.
//
// The delay between probes grows with the outage: it is a quarter of the time
// since the breaker opened (a sixteenth while the node refuses connections),
// at least the least delay and at most Max. So a node that comes back is
// found within about a quarter of the time it was away (a one-minute hang
// within about 15s; a one-second restart within about 100ms), and a node
// that stays away is probed ever more rarely, never less than once per Max.
type Schedule struct {
	first, max, stable time.Duration
	jitter             func() float64

	mu       sync.Mutex
	level    uint      // guarded by mu; doublings of First for the current opening
	openedAt time.Time // guarded by mu; when the current opening began
	closedAt time.Time // guarded by mu; when the node last recovered; zero if never
	refused  bool      // guarded by mu; a probe of the current opening was refused
	restart  bool      // guarded by mu; the last opening ended with a restart (refused, then answered)
}

// NewSchedule returns a Schedule configured by s.
func NewSchedule(s ScheduleSettings) *Schedule {
	sc := &Schedule{first: s.First, max: s.Max, stable: s.Stable, jitter: s.Jitter}
	if sc.first <= 0 {
		sc.first = DefaultFirstProbe
	}
	if sc.max <= 0 {
		sc.max = DefaultMaxProbe
	}
	sc.max = max(sc.max, sc.first)
	if sc.stable <= 0 {
		sc.stable = sc.max
	}
	if sc.jitter == nil {
		sc.jitter = rand.Float64
	}
	return sc
}

// Opened starts an outage at now and returns the delay before its first
// probe.
func (s *Schedule) Opened(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closedAt.IsZero() || now.Sub(s.closedAt) >= s.stable || s.restart:
		s.level = 0
	case s.least() < s.max:
		s.level++
	}
	s.openedAt, s.refused, s.restart = now, false, false
	return s.spread(s.least())
}

// Next returns the delay before the next probe, after one that failed at
// now. refused says that the probe's connection was refused: nothing listens
// on the node's port (a restart in progress), so a probe costs the node no
// connection, and the next comes four times sooner.
func (s *Schedule) Next(now time.Time, refused bool) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	part := time.Duration(4)
	if refused {
		part = 16
		s.refused = true
	}
	d := min(max(now.Sub(s.openedAt)/part, s.least()), s.max)
	return s.spread(d)
}

// Recovered records that the node's breaker closed at now.
func (s *Schedule) Recovered(now time.Time) {
	s.mu.Lock()
	s.closedAt, s.restart = now, s.refused
	s.mu.Unlock()
}

// least is the least delay for the current opening. s.mu must be held.
func (s *Schedule) least() time.Duration {
	if s.level >= 32 {
		return s.max
	}
	return min(s.first<<s.level, s.max)
}

// spread applies the jitter to d. s.mu must be held.
func (s *Schedule) spread(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*s.jitter()))
}
