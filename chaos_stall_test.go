package redisguard

import (
	"sync"
	"testing"
	"time"
)

// stallMeter measures how late the process itself runs: a goroutine that
// asks to wake every stallTick and notes each wake-up that comes more than
// stallNoted late. A call that returns after its context's deadline by
// less than the process's own lateness in that window was not kept by the
// client; a run with -race on two cores, other test binaries beside it,
// has such stalls of a few hundred milliseconds.
type stallMeter struct {
	mu     sync.Mutex
	stalls []stall // guarded by mu; in time order
}

// stall is one late wake-up: at is when it came, late how late.
type stall struct {
	at   time.Time
	late time.Duration
}

const (
	stallTick  = 5 * time.Millisecond
	stallNoted = 10 * time.Millisecond
)

// run measures until stop is closed.
func (m *stallMeter) run(stop <-chan struct{}) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			// The ticker's channel holds one tick: a wake-up after a stall
			// reads a tick from its start, so time is measured from the
			// previous wake-up, not from the tick.
			now = time.Now()
			if late := now.Sub(last) - stallTick; late > stallNoted {
				m.mu.Lock()
				m.stalls = append(m.stalls, stall{at: now, late: late})
				m.mu.Unlock()
			}
			last = now
		}
	}
}

// within returns how long the process stalled between from and to: the
// lateness of the wake-ups in that window, each counted up to the part of
// it inside the window.
func (m *stallMeter) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum time.Duration
	for _, s := range m.stalls {
		began := s.at.Add(-s.late)
		if !s.at.After(from) || !began.Before(to) {
			continue
		}
		end := s.at
		if end.After(to) {
			end = to
		}
		if began.Before(from) {
			began = from
		}
		sum += end.Sub(began)
	}
	return sum
}

// worst returns the longest stall seen.
func (m *stallMeter) worst() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var w time.Duration
	for _, s := range m.stalls {
		w = max(w, s.late)
	}
	return w
}

func TestStallMeterWithin(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// Stalls from 100 to 150ms and from 400 to 600ms.
	m := &stallMeter{stalls: []stall{{at: at(150), late: ms(50)}, {at: at(600), late: ms(200)}}}
	for _, tt := range []struct {
		name     string
		from, to int
		want     time.Duration
	}{
		{"before both", 0, 90, 0},
		{"the first whole", 90, 200, ms(50)},
		{"the first's second half", 125, 200, ms(25)},
		{"between", 160, 390, 0},
		{"the second's middle", 450, 550, ms(100)},
		{"both", 0, 700, ms(250)},
		{"after both", 600, 900, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.within(at(tt.from), at(tt.to)); got != tt.want {
				t.Errorf("within(%d, %d) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		})
	}
	if got := m.worst(); got != ms(200) {
		t.Errorf("worst = %v, want 200ms", got)
	}
}
