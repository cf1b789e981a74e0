package breaker_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// TestStress hammers one breaker from many goroutines while they move the clock,
// and checks the invariants that must hold whatever the interleaving. Run it
// with -race.
func TestStress(t *testing.T) {
	const (
		workers    = 8
		iterations = 3000
		threshold  = 3
		recovery   = 100 * time.Millisecond
		tick       = 5 * time.Millisecond
	)
	fc := clock.NewFake(epoch)

	// edges counts OnStateChange calls by (from, to).
	var edges [3][3]atomic.Int64
	valid := map[transition]bool{
		{breaker.Closed, breaker.Open}:     true,
		{breaker.Open, breaker.HalfOpen}:   true,
		{breaker.HalfOpen, breaker.Open}:   true,
		{breaker.HalfOpen, breaker.Closed}: true,
	}
	b := breaker.New(breaker.Settings{
		Threshold:    threshold,
		RecoveryTime: recovery,
		Clock:        fc,
		OnStateChange: func(from, to breaker.State) {
			if !valid[transition{from, to}] {
				t.Errorf("invalid transition %v -> %v", from, to)
				return
			}
			edges[from][to].Add(1)
		},
	})

	// probes holds the probes the test has been granted and not yet
	// reported, each with the clock readings taken just before and just
	// after the Allow that granted it. The breaker hands out a second probe
	// while the first is out only once it has given up on the first, which
	// takes the recovery time; so any two probes out at once must have been
	// granted at least that far apart. The readings bound each grant time,
	// and the test learns of grants in whatever order the goroutines run, so
	// the check accepts either order. A lost probe, never to be reported,
	// stays until the next grant, which shows the breaker moved past it.
	type flight struct {
		before, after time.Time
		lost          bool
	}
	var (
		probesMu sync.Mutex
		probes   = map[int]*flight{}
		nextID   int
		replaced int
	)
	grantProbe := func(before, after time.Time) int {
		probesMu.Lock()
		defer probesMu.Unlock()
		for id, p := range probes {
			if after.Sub(p.before) < recovery && p.after.Sub(before) < recovery {
				t.Errorf("probe granted in [%v, %v] while probe %d, granted in [%v, %v], was out",
					before.Sub(epoch), after.Sub(epoch), id, p.before.Sub(epoch), p.after.Sub(epoch))
			}
			if p.lost {
				replaced++
				delete(probes, id)
			}
		}
		nextID++
		probes[nextID] = &flight{before: before, after: after}
		return nextID
	}
	// returnProbe is called before Done, so a probe leaves probes no later
	// than the breaker learns its outcome.
	returnProbe := func(id int, lost bool) {
		probesMu.Lock()
		defer probesMu.Unlock()
		if lost {
			probes[id].lost = true
		} else {
			delete(probes, id)
		}
	}

	checkSnapshot := func(s breaker.Snapshot) {
		switch {
		case s.State == breaker.Closed && s.ConsecutiveFailures >= threshold:
			t.Errorf("closed with %d consecutive failures, threshold %d", s.ConsecutiveFailures, threshold)
		case s.State != breaker.Closed && s.ConsecutiveFailures != 0:
			t.Errorf("%v with %d consecutive failures", s.State, s.ConsecutiveFailures)
		case s.ProbeInFlight && s.State != breaker.HalfOpen:
			t.Errorf("probe in flight while %v", s.State)
		}
	}

	var (
		wg      sync.WaitGroup
		allowed atomic.Int64
		lost    atomic.Int64
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range iterations {
				before := fc.Now()
				tk, err := b.Allow()
				if err != nil {
					if !errors.Is(err, breaker.ErrOpen) {
						t.Errorf("Allow() = %v", err)
					}
					// Rejected callers move the clock, so time passes in
					// step with the work instead of racing ahead of it
					// or lagging behind.
					fc.Advance(time.Duration(rng.IntN(int(2 * tick))))
					if rng.IntN(8) == 0 {
						checkSnapshot(b.Snapshot())
					}
					continue
				}
				allowed.Add(1)
				id := -1
				if tk.Probe() {
					id = grantProbe(before, fc.Now())
				}
				var o breaker.Outcome
				switch r := rng.IntN(100); {
				case r < 3:
					// Never report: a lost probe must not wedge the
					// breaker, and a lost ordinary call must not matter.
					lost.Add(1)
					if id >= 0 {
						returnProbe(id, true)
					}
					continue
				case r < 60:
					o = breaker.Success
				case r < 90:
					o = breaker.Failure
				default:
					o = breaker.Neutral
				}
				if id >= 0 {
					returnProbe(id, false)
				}
				b.Done(tk, o)
				runtime.Gosched()
			}
		})
	}

	wg.Wait()

	final := b.Snapshot()
	checkSnapshot(final)
	count := func(from, to breaker.State) int64 { return edges[from][to].Load() }
	is := func(s breaker.State) int64 {
		if final.State == s {
			return 1
		}
		return 0
	}
	// Every state is entered as often as it is left, except the final one,
	// which is entered once more; Closed is entered once for free by New.
	if got := 1 + count(breaker.HalfOpen, breaker.Closed) - count(breaker.Closed, breaker.Open); got != is(breaker.Closed) {
		t.Errorf("closed: entered - left = %d, final state %v", got, final.State)
	}
	if got := count(breaker.Open, breaker.HalfOpen) - count(breaker.HalfOpen, breaker.Closed) - count(breaker.HalfOpen, breaker.Open); got != is(breaker.HalfOpen) {
		t.Errorf("half-open: entered - left = %d, final state %v", got, final.State)
	}
	if got := count(breaker.Closed, breaker.Open) + count(breaker.HalfOpen, breaker.Open) - count(breaker.Open, breaker.HalfOpen); got != is(breaker.Open) {
		t.Errorf("open: entered - left = %d, final state %v", got, final.State)
	}
	if got := int64(final.Opens); got != count(breaker.Closed, breaker.Open)+count(breaker.HalfOpen, breaker.Open) {
		t.Errorf("Snapshot().Opens = %d, OnStateChange saw %d", got,
			count(breaker.Closed, breaker.Open)+count(breaker.HalfOpen, breaker.Open))
	}
	// A run in which the breaker never left Closed, or never closed again,
	// would not have exercised the machine.
	if count(breaker.Closed, breaker.Open) == 0 || count(breaker.HalfOpen, breaker.Closed) == 0 || count(breaker.HalfOpen, breaker.Open) == 0 {
		t.Errorf("stress run missed a transition: %d closed->open, %d half-open->closed, %d half-open->open",
			count(breaker.Closed, breaker.Open), count(breaker.HalfOpen, breaker.Closed), count(breaker.HalfOpen, breaker.Open))
	}
	if replaced == 0 {
		t.Errorf("no lost probe was replaced (%d calls never reported)", lost.Load())
	}
	t.Logf("%d calls allowed, %d never reported, %d probes replaced, %d opens, final %+v",
		allowed.Load(), lost.Load(), replaced, final.Opens, final)
}
