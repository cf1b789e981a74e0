package breaker_test

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redisguard/redisguard/internal/breaker"
)

// TestStress hammers one breaker from many goroutines while another plays the
// prober, recovering it whenever it is open, and checks the invariants that
// must hold whatever the interleaving. Run it with -race.
func TestStress(t *testing.T) {
	const (
		workers    = 8
		iterations = 3000
		threshold  = 3
	)
	// edges counts OnStateChange calls by (from, to).
	var edges [3][3]atomic.Int64
	valid := map[transition]bool{
		{breaker.Closed, breaker.Open}:     true,
		{breaker.Open, breaker.HalfOpen}:   true,
		{breaker.HalfOpen, breaker.Open}:   true,
		{breaker.HalfOpen, breaker.Closed}: true,
	}
	b := breaker.New(breaker.Settings{
		Threshold: threshold,
		OnStateChange: func(from, to breaker.State) {
			if !valid[transition{from, to}] {
				t.Errorf("invalid transition %v -> %v", from, to)
				return
			}
			edges[from][to].Add(1)
		},
	})
	checkSnapshot := func(s breaker.Snapshot) {
		switch {
		case s.State == breaker.Closed && s.ConsecutiveFailures >= threshold:
			t.Errorf("closed with %d consecutive failures, threshold %d", s.ConsecutiveFailures, threshold)
		case s.State != breaker.Closed && s.ConsecutiveFailures != 0:
			t.Errorf("%v with %d consecutive failures", s.State, s.ConsecutiveFailures)
		}
	}

	var (
		wg, prober sync.WaitGroup
		done       = make(chan struct{})
		allowed    atomic.Int64
		rejected   atomic.Int64
	)
	prober.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			b.Recover()
			runtime.Gosched()
		}
	})
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			// iterations calls let through, so that a scheduler which runs
			// the prober rarely cannot leave the run with few recoveries;
			// bounded in case the breaker stops letting calls through.
			for n, tries := 0, 0; n < iterations && tries < 1000*iterations; tries++ {
				tk, err := b.Allow()
				if err != nil {
					if !errors.Is(err, breaker.ErrOpen) {
						t.Errorf("Allow() = %v", err)
					}
					rejected.Add(1)
					if rng.IntN(8) == 0 {
						checkSnapshot(b.Snapshot())
					}
					continue
				}
				allowed.Add(1)
				n++
				var o breaker.Outcome
				switch r := rng.IntN(100); {
				case r < 3:
					continue // never reported: a lost call must not matter
				case r < 60:
					o = breaker.Success
				case r < 90:
					o = breaker.Failure
				default:
					o = breaker.Neutral
				}
				b.Done(tk, o)
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	close(done)
	prober.Wait()

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
	t.Logf("%d calls allowed, %d rejected, %d opens, final %+v", allowed.Load(), rejected.Load(), final.Opens, final)
}
