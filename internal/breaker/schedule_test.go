package breaker_test

import (
	"testing"
	"time"

	"github.com/redisguard/redisguard/internal/breaker"
)

// noJitter makes every delay exact: the factor is 0.8 + 0.4*0.5 = 1.
func noJitter() float64 { return 0.5 }

func TestScheduleDelaysGrowWithTheOutage(t *testing.T) {
	s := breaker.NewSchedule(breaker.ScheduleSettings{Jitter: noJitter})
	if got := s.Opened(epoch); got != breaker.DefaultFirstProbe {
		t.Fatalf("first delay = %v, want %v", got, breaker.DefaultFirstProbe)
	}
	tests := []struct {
		failedAt time.Duration // since the opening
		want     time.Duration
	}{
		{100 * time.Millisecond, 100 * time.Millisecond}, // a quarter is below the least delay
		{400 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 250 * time.Millisecond},
		{4 * time.Second, time.Second},
		{39 * time.Second, 9750 * time.Millisecond},
		{time.Minute, breaker.DefaultMaxProbe}, // never more than Max
		{time.Hour, breaker.DefaultMaxProbe},
	}
	for _, tt := range tests {
		if got := s.Next(epoch.Add(tt.failedAt), false); got != tt.want {
			t.Errorf("Next after %v of outage = %v, want %v", tt.failedAt, got, tt.want)
		}
	}
}

// A probe whose connection was refused cost the node nothing: the next one
// comes four times sooner, within the same bounds.
func TestScheduleRefusedProbesComeSooner(t *testing.T) {
	s := breaker.NewSchedule(breaker.ScheduleSettings{Jitter: noJitter})
	s.Opened(epoch)
	for _, tt := range []struct {
		failedAt, want time.Duration
	}{
		{time.Second, 100 * time.Millisecond},
		{4 * time.Second, 250 * time.Millisecond},
		{40 * time.Second, 2500 * time.Millisecond},
		{time.Hour, breaker.DefaultMaxProbe},
	} {
		if got := s.Next(epoch.Add(tt.failedAt), true); got != tt.want {
			t.Errorf("Next after a refusal at %v of outage = %v, want %v", tt.failedAt, got, tt.want)
		}
	}
}

func TestScheduleJitter(t *testing.T) {
	for _, tt := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 80 * time.Millisecond}, {0.999999, 119999960 * time.Nanosecond}} {
		s := breaker.NewSchedule(breaker.ScheduleSettings{Jitter: func() float64 { return tt.jitter }})
		if got := s.Opened(epoch); got != tt.want {
			t.Errorf("jitter %v: first delay %v, want %v", tt.jitter, got, tt.want)
		}
	}
}

// A node that opens again soon after it recovered starts further back each
// time; one that stayed healthy for Stable starts from First again.
func TestScheduleFlappingNodeWaitsLonger(t *testing.T) {
	s := breaker.NewSchedule(breaker.ScheduleSettings{
		First: 100 * time.Millisecond, Max: 2 * time.Second, Stable: 10 * time.Second, Jitter: noJitter,
	})
	now := epoch
	flap := func(healthyFor time.Duration) time.Duration {
		t.Helper()
		now = now.Add(healthyFor)
		d := s.Opened(now)
		now = now.Add(time.Second)
		s.Recovered(now)
		return d
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 2000, 2000}
	for i, w := range want {
		if got := flap(time.Second); got != w*time.Millisecond {
			t.Fatalf("opening %d after a short recovery: first delay %v, want %vms", i+1, got, w)
		}
	}
	// The least delay holds for the whole opening, not just its first probe.
	now = now.Add(time.Second)
	s.Opened(now)
	if got := s.Next(now.Add(100*time.Millisecond), false); got != 2*time.Second {
		t.Fatalf("Next while flapping = %v, want the raised least delay 2s", got)
	}
	s.Recovered(now.Add(time.Second))
	now = now.Add(time.Second)
	if got := flap(10 * time.Second); got != 100*time.Millisecond {
		t.Fatalf("opening after 10s healthy: first delay %v, want 100ms", got)
	}
}

// A server that restarts again and again (a crash loop, a rolling deploy)
// refuses connections through each outage: it is found by the refused
// probes' quick cadence every time, and its openings never escalate.
func TestScheduleRestartsAreNotFlapping(t *testing.T) {
	s := breaker.NewSchedule(breaker.ScheduleSettings{
		First: 100 * time.Millisecond, Max: 2 * time.Second, Stable: 10 * time.Second, Jitter: noJitter,
	})
	now := epoch
	for i := range 6 {
		if got := s.Opened(now); got != 100*time.Millisecond {
			t.Fatalf("restart %d: first delay %v, want 100ms", i+1, got)
		}
		s.Next(now.Add(100*time.Millisecond), true) // refused: nothing listens
		now = now.Add(time.Second)
		s.Recovered(now)
		now = now.Add(2 * time.Second)
	}
	// An opening without a refusal, soon after, is flapping again.
	s.Opened(now)
	s.Next(now.Add(100*time.Millisecond), false)
	s.Recovered(now.Add(time.Second))
	if got := s.Opened(now.Add(2 * time.Second)); got != 200*time.Millisecond {
		t.Fatalf("after an outage without refusals: first delay %v, want 200ms", got)
	}
}

func TestScheduleDefaults(t *testing.T) {
	s := breaker.NewSchedule(breaker.ScheduleSettings{First: time.Second, Max: time.Millisecond, Jitter: noJitter})
	if got := s.Opened(epoch); got != time.Second {
		t.Fatalf("Max below First: first delay %v, want First (1s)", got)
	}
	if got := s.Next(epoch.Add(time.Hour), false); got != time.Second {
		t.Fatalf("Max below First: later delay %v, want First (1s)", got)
	}
}
