package breaker_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

var epoch = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

// recorder collects OnStateChange calls.
type recorder struct {
	mu  sync.Mutex
	got []transition
}

type transition struct{ from, to breaker.State }

func (r *recorder) record(from, to breaker.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, transition{from, to})
}

func (r *recorder) transitions() []transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

const (
	testThreshold = 3
	testRecovery  = 5 * time.Second
)

// newTestBreaker returns a breaker with threshold 3 and recovery 5s on a fake
// clock, recording its transitions.
func newTestBreaker() (*breaker.Breaker, *clock.Fake, *recorder) {
	fc := clock.NewFake(epoch)
	rec := &recorder{}
	b := breaker.New(breaker.Settings{
		Threshold:     testThreshold,
		RecoveryTime:  testRecovery,
		Clock:         fc,
		OnStateChange: rec.record,
	})
	return b, fc, rec
}

// call makes one call through b with the given outcome, failing the test if
// the breaker rejects it.
func call(t *testing.T, b *breaker.Breaker, o breaker.Outcome) {
	t.Helper()
	tk, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow() before reporting %v: %v", o, err)
	}
	b.Done(tk, o)
}

// trip opens a closed test breaker.
func trip(t *testing.T, b *breaker.Breaker) {
	t.Helper()
	for range testThreshold {
		call(t, b, breaker.Failure)
	}
	if got := b.State(); got != breaker.Open {
		t.Fatalf("after %d failures: state %v, want open", testThreshold, got)
	}
}

// probe opens the breaker, waits out the recovery time and takes the probe.
func probe(t *testing.T, b *breaker.Breaker, fc *clock.Fake) breaker.Ticket {
	t.Helper()
	trip(t, b)
	fc.Advance(testRecovery)
	tk, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow() after recovery time: %v", err)
	}
	if !tk.Probe() {
		t.Fatal("first ticket after recovery time is not a probe")
	}
	return tk
}

func wantRejected(t *testing.T, b *breaker.Breaker, why string) {
	t.Helper()
	if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("%s: Allow() error = %v, want ErrOpen", why, err)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		give fmtStringer
		want string
	}{
		{breaker.Closed, "closed"},
		{breaker.HalfOpen, "half-open"},
		{breaker.Open, "open"},
		{breaker.State(9), "State(9)"},
		{breaker.Success, "success"},
		{breaker.Failure, "failure"},
		{breaker.Neutral, "neutral"},
		{breaker.Outcome(7), "Outcome(7)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.give.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

type fmtStringer interface{ String() string }

// TestDefaults checks the documented defaults by behaviour: how many failures
// open the breaker, and how long it then stays open.
func TestDefaults(t *testing.T) {
	tests := []struct {
		name          string
		settings      breaker.Settings
		wantThreshold int
		wantRecovery  time.Duration
	}{
		{"zero settings", breaker.Settings{}, breaker.DefaultThreshold, breaker.DefaultRecoveryTime},
		{"explicit", breaker.Settings{Threshold: 2, RecoveryTime: time.Second}, 2, time.Second},
		{"threshold one", breaker.Settings{Threshold: 1}, 1, breaker.DefaultRecoveryTime},
		{"negative recovery", breaker.Settings{RecoveryTime: -time.Second}, breaker.DefaultThreshold, breaker.DefaultRecoveryTime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := clock.NewFake(epoch)
			s := tt.settings
			s.Clock = fc
			b := breaker.New(s)
			for range tt.wantThreshold - 1 {
				call(t, b, breaker.Failure)
			}
			if got := b.State(); got != breaker.Closed {
				t.Fatalf("after %d failures: state %v, want closed", tt.wantThreshold-1, got)
			}
			call(t, b, breaker.Failure)
			if got := b.State(); got != breaker.Open {
				t.Fatalf("after %d failures: state %v, want open", tt.wantThreshold, got)
			}
			fc.Advance(tt.wantRecovery - time.Nanosecond)
			wantRejected(t, b, "just before the recovery time")
			fc.Advance(time.Nanosecond)
			if got := b.State(); got != breaker.HalfOpen {
				t.Fatalf("at the recovery time: state %v, want half-open", got)
			}
		})
	}
}

func TestRealClockByDefault(t *testing.T) {
	before := time.Now()
	b := breaker.New(breaker.Settings{})
	if got := b.Snapshot().LastTransition; got.Before(before) || got.After(time.Now()) {
		t.Fatalf("LastTransition = %v, want the real time of New", got)
	}
}

func TestClosed(t *testing.T) {
	const (
		S = breaker.Success
		F = breaker.Failure
		N = breaker.Neutral
	)
	tests := []struct {
		name         string
		outcomes     []breaker.Outcome
		wantState    breaker.State
		wantFailures int
	}{
		{"no calls", nil, breaker.Closed, 0},
		{"below threshold", []breaker.Outcome{F, F}, breaker.Closed, 2},
		{"threshold reached", []breaker.Outcome{F, F, F}, breaker.Open, 0},
		{"success resets the count", []breaker.Outcome{F, F, S, F, F}, breaker.Closed, 2},
		{"neutral is ignored", []breaker.Outcome{F, F, N, N}, breaker.Closed, 2},
		{"neutral does not break the run", []breaker.Outcome{F, N, F, N, F}, breaker.Open, 0},
		{"unknown outcome counts as neutral", []breaker.Outcome{F, F, breaker.Outcome(42)}, breaker.Closed, 2},
		{"successes alone", []breaker.Outcome{S, S, S, S}, breaker.Closed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _, _ := newTestBreaker()
			for _, o := range tt.outcomes {
				call(t, b, o)
			}
			s := b.Snapshot()
			if s.State != tt.wantState || s.ConsecutiveFailures != tt.wantFailures {
				t.Fatalf("state %v with %d failures, want %v with %d",
					s.State, s.ConsecutiveFailures, tt.wantState, tt.wantFailures)
			}
		})
	}
}

func TestOpenFailsFastUntilRecoveryTime(t *testing.T) {
	b, fc, _ := newTestBreaker()
	trip(t, b)
	for _, d := range []time.Duration{0, time.Second, testRecovery - time.Nanosecond} {
		fc.Set(epoch.Add(d))
		wantRejected(t, b, "open for "+d.String())
		if got := b.State(); got != breaker.Open {
			t.Fatalf("open for %v: state %v, want open", d, got)
		}
	}
}

func TestHalfOpenProbe(t *testing.T) {
	tests := []struct {
		name    string
		outcome breaker.Outcome
		// check runs with the clock at the moment the probe reported.
		check func(t *testing.T, b *breaker.Breaker, fc *clock.Fake)
	}{
		{
			name:    "success closes",
			outcome: breaker.Success,
			check: func(t *testing.T, b *breaker.Breaker, _ *clock.Fake) {
				if s := b.Snapshot(); s.State != breaker.Closed || s.ConsecutiveFailures != 0 {
					t.Fatalf("state %v with %d failures, want closed with 0", s.State, s.ConsecutiveFailures)
				}
				tk, err := b.Allow()
				if err != nil || tk.Probe() {
					t.Fatalf("Allow() after closing = probe %v, %v; want an ordinary ticket", tk.Probe(), err)
				}
				// The count starts afresh: threshold-1 failures keep it closed.
				b.Done(tk, breaker.Failure)
				call(t, b, breaker.Failure)
				if got := b.State(); got != breaker.Closed {
					t.Fatalf("after %d failures: state %v, want closed", testThreshold-1, got)
				}
			},
		},
		{
			name:    "failure reopens and restarts the recovery time",
			outcome: breaker.Failure,
			check: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				if got := b.State(); got != breaker.Open {
					t.Fatalf("state %v, want open", got)
				}
				fc.Advance(testRecovery - time.Nanosecond)
				wantRejected(t, b, "just before the new recovery time")
				fc.Advance(time.Nanosecond)
				tk, err := b.Allow()
				if err != nil || !tk.Probe() {
					t.Fatalf("Allow() at the new recovery time = probe %v, %v; want a probe", tk.Probe(), err)
				}
			},
		},
		{
			name:    "neutral releases the slot",
			outcome: breaker.Neutral,
			check: func(t *testing.T, b *breaker.Breaker, _ *clock.Fake) {
				if s := b.Snapshot(); s.State != breaker.HalfOpen || s.ProbeInFlight {
					t.Fatalf("state %v, probe in flight %v; want half-open with no probe", s.State, s.ProbeInFlight)
				}
				tk, err := b.Allow()
				if err != nil || !tk.Probe() {
					t.Fatalf("Allow() after neutral probe = probe %v, %v; want a probe", tk.Probe(), err)
				}
				wantRejected(t, b, "while the second probe is in flight")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, fc, _ := newTestBreaker()
			tk := probe(t, b, fc)
			// The probe stays out for a while: the recovery time after a
			// failure must count from the report, not from the grant.
			fc.Advance(2 * time.Second)
			wantRejected(t, b, "while the probe is in flight")
			if s := b.Snapshot(); s.State != breaker.HalfOpen || !s.ProbeInFlight {
				t.Fatalf("state %v, probe in flight %v; want half-open with a probe", s.State, s.ProbeInFlight)
			}
			b.Done(tk, tt.outcome)
			tt.check(t, b, fc)
		})
	}
}

func TestHalfOpenLetsExactlyOneConcurrentCallerThrough(t *testing.T) {
	const callers = 64
	b, fc, _ := newTestBreaker()
	trip(t, b)
	fc.Advance(testRecovery)

	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		mu       sync.Mutex
		allowed  []breaker.Ticket
		rejected int
	)
	for range callers {
		wg.Go(func() {
			<-start
			tk, err := b.Allow()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				allowed = append(allowed, tk)
			case errors.Is(err, breaker.ErrOpen):
				rejected++
			default:
				t.Errorf("Allow() = %v, want nil or ErrOpen", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(allowed) != 1 || rejected != callers-1 {
		t.Fatalf("%d allowed, %d rejected; want 1 and %d", len(allowed), rejected, callers-1)
	}
	if !allowed[0].Probe() {
		t.Fatal("the caller let through does not hold the probe")
	}
}

func TestStuckProbeIsReplacedAfterRecoveryTime(t *testing.T) {
	b, fc, _ := newTestBreaker()
	stuck := probe(t, b, fc)

	fc.Advance(testRecovery - time.Nanosecond)
	wantRejected(t, b, "probe in flight just under the recovery time")
	fc.Advance(time.Nanosecond)
	second, err := b.Allow()
	if err != nil || !second.Probe() {
		t.Fatalf("Allow() with a probe stuck for the recovery time = probe %v, %v; want a new probe", second.Probe(), err)
	}
	wantRejected(t, b, "while the replacement probe is in flight")

	// The stuck probe's late answer is about an earlier generation.
	b.Done(stuck, breaker.Success)
	if got := b.State(); got != breaker.HalfOpen {
		t.Fatalf("after the stuck probe reported: state %v, want half-open", got)
	}
	b.Done(second, breaker.Success)
	if got := b.State(); got != breaker.Closed {
		t.Fatalf("after the replacement probe succeeded: state %v, want closed", got)
	}
}

func TestStaleResultsAreDropped(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, b *breaker.Breaker, fc *clock.Fake)
	}{
		{
			name: "closed-era failure after reopening does not count",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				old, _ := b.Allow()
				b.Done(probe(t, b, fc), breaker.Success)
				b.Done(old, breaker.Failure)
				if s := b.Snapshot(); s.ConsecutiveFailures != 0 {
					t.Fatalf("ConsecutiveFailures = %d, want 0", s.ConsecutiveFailures)
				}
			},
		},
		{
			name: "closed-era success after reopening does not reset the count",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				old, _ := b.Allow()
				b.Done(probe(t, b, fc), breaker.Success)
				call(t, b, breaker.Failure)
				call(t, b, breaker.Failure)
				b.Done(old, breaker.Success)
				if s := b.Snapshot(); s.ConsecutiveFailures != 2 {
					t.Fatalf("ConsecutiveFailures = %d, want 2", s.ConsecutiveFailures)
				}
			},
		},
		{
			name: "closed-era success does not close a half-open breaker",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				old, _ := b.Allow()
				probe(t, b, fc)
				b.Done(old, breaker.Success)
				if s := b.Snapshot(); s.State != breaker.HalfOpen || !s.ProbeInFlight {
					t.Fatalf("state %v, probe in flight %v; want half-open with the probe out", s.State, s.ProbeInFlight)
				}
			},
		},
		{
			name: "closed-era neutral does not free the probe slot",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				old, _ := b.Allow()
				probe(t, b, fc)
				b.Done(old, breaker.Neutral)
				wantRejected(t, b, "probe still in flight")
			},
		},
		{
			name: "closed-era failure does not reopen a half-open breaker",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				old, _ := b.Allow()
				probe(t, b, fc)
				b.Done(old, breaker.Failure)
				if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Opens != 1 {
					t.Fatalf("state %v after %d opens; want half-open after 1", s.State, s.Opens)
				}
			},
		},
		{
			name: "a neutral probe cannot report again",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				tk := probe(t, b, fc)
				b.Done(tk, breaker.Neutral)
				b.Done(tk, breaker.Failure)
				if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Opens != 1 {
					t.Fatalf("state %v after %d opens; want half-open after 1", s.State, s.Opens)
				}
				b.Done(tk, breaker.Success)
				if got := b.State(); got != breaker.HalfOpen {
					t.Fatalf("state %v, want half-open", got)
				}
			},
		},
		{
			name: "a probe reported twice counts once",
			run: func(t *testing.T, b *breaker.Breaker, fc *clock.Fake) {
				first := probe(t, b, fc)
				b.Done(first, breaker.Neutral)
				second, err := b.Allow()
				if err != nil {
					t.Fatalf("Allow() after neutral probe: %v", err)
				}
				b.Done(first, breaker.Neutral)
				wantRejected(t, b, "second probe in flight after a repeated report")
				b.Done(first, breaker.Failure)
				if got := b.State(); got != breaker.HalfOpen {
					t.Fatalf("state %v, want half-open", got)
				}
				b.Done(second, breaker.Success)
				if got := b.State(); got != breaker.Closed {
					t.Fatalf("state %v, want closed", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, fc, _ := newTestBreaker()
			tt.run(t, b, fc)
		})
	}
}

func TestDisabled(t *testing.T) {
	fc := clock.NewFake(epoch)
	rec := &recorder{}
	b := breaker.New(breaker.Settings{Threshold: -1, Clock: fc, OnStateChange: rec.record})
	for range 100 {
		call(t, b, breaker.Failure)
	}
	fc.Advance(time.Hour)
	want := breaker.Snapshot{State: breaker.Closed, LastTransition: epoch}
	if got := b.Snapshot(); got != want {
		t.Fatalf("Snapshot() = %+v, want %+v", got, want)
	}
	if got := b.State(); got != breaker.Closed {
		t.Fatalf("State() = %v, want closed", got)
	}
	if got := rec.transitions(); len(got) != 0 {
		t.Fatalf("OnStateChange called %v", got)
	}
}

func TestOnStateChange(t *testing.T) {
	b, fc, rec := newTestBreaker()
	var want []transition
	step := func(why string, tr ...transition) {
		t.Helper()
		want = append(want, tr...)
		if got := rec.transitions(); !slices.Equal(got, want) {
			t.Fatalf("%s: transitions %v, want %v", why, got, want)
		}
	}

	trip(t, b)
	step("tripped", transition{breaker.Closed, breaker.Open})
	fc.Advance(testRecovery)
	if got := b.State(); got != breaker.HalfOpen {
		t.Fatalf("State() = %v, want half-open", got)
	}
	step("recovery time passed, seen by State", transition{breaker.Open, breaker.HalfOpen})
	tk, _ := b.Allow()
	b.Done(tk, breaker.Neutral)
	step("neutral probe changes no state")
	tk, _ = b.Allow()
	b.Done(tk, breaker.Failure)
	step("probe failed", transition{breaker.HalfOpen, breaker.Open})
	fc.Advance(testRecovery)
	tk, _ = b.Allow()
	step("recovery time passed, seen by Allow", transition{breaker.Open, breaker.HalfOpen})
	b.Done(tk, breaker.Success)
	step("probe succeeded", transition{breaker.HalfOpen, breaker.Closed})
}

// The callback runs outside the lock, so it may call back into the breaker.
// Were it called under the lock, this test would deadlock.
func TestOnStateChangeMayCallBreaker(t *testing.T) {
	fc := clock.NewFake(epoch)
	var (
		b    *breaker.Breaker
		seen []breaker.State
	)
	b = breaker.New(breaker.Settings{
		Threshold: 1,
		Clock:     fc,
		OnStateChange: func(_, to breaker.State) {
			seen = append(seen, b.Snapshot().State)
			if got := b.State(); got != to {
				t.Errorf("State() inside callback = %v, want %v", got, to)
			}
		},
	})
	call(t, b, breaker.Failure)
	if want := []breaker.State{breaker.Open}; !slices.Equal(seen, want) {
		t.Fatalf("states seen from callback %v, want %v", seen, want)
	}
}

func TestSnapshot(t *testing.T) {
	b, fc, _ := newTestBreaker()
	want := func(why string, s breaker.Snapshot) {
		t.Helper()
		if got := b.Snapshot(); got != s {
			t.Fatalf("%s: Snapshot() = %+v, want %+v", why, got, s)
		}
	}
	want("new", breaker.Snapshot{State: breaker.Closed, LastTransition: epoch})

	fc.Advance(time.Second)
	call(t, b, breaker.Failure)
	want("one failure", breaker.Snapshot{State: breaker.Closed, ConsecutiveFailures: 1, LastTransition: epoch})

	fc.Advance(time.Second)
	call(t, b, breaker.Failure)
	call(t, b, breaker.Failure)
	opened := epoch.Add(2 * time.Second)
	want("tripped", breaker.Snapshot{State: breaker.Open, LastTransition: opened, Opens: 1})

	fc.Advance(testRecovery)
	halfOpened := opened.Add(testRecovery)
	want("recovery time passed", breaker.Snapshot{State: breaker.HalfOpen, LastTransition: halfOpened, Opens: 1})

	tk, _ := b.Allow()
	want("probing", breaker.Snapshot{State: breaker.HalfOpen, LastTransition: halfOpened, Opens: 1, ProbeInFlight: true})

	fc.Advance(time.Second)
	b.Done(tk, breaker.Failure)
	reopened := halfOpened.Add(time.Second)
	want("probe failed", breaker.Snapshot{State: breaker.Open, LastTransition: reopened, Opens: 2})

	fc.Advance(testRecovery)
	tk, _ = b.Allow()
	fc.Advance(time.Second)
	b.Done(tk, breaker.Success)
	want("probe succeeded", breaker.Snapshot{State: breaker.Closed, LastTransition: reopened.Add(testRecovery + time.Second), Opens: 2})
}

// A probe slower than RecoveryTime but within ProbeTimeout is not replaced:
// its failure must reopen the breaker. With the replacement at RecoveryTime,
// a node whose calls time out after longer than RecoveryTime kept the breaker
// half-open for ever, each probe given up on just before it failed.
func TestSlowProbeWithinProbeTimeoutIsNotReplaced(t *testing.T) {
	fc := clock.NewFake(epoch)
	b := breaker.New(breaker.Settings{
		Threshold:    testThreshold,
		RecoveryTime: testRecovery,
		ProbeTimeout: 3 * testRecovery,
		Clock:        fc,
	})
	tk := probe(t, b, fc)
	fc.Advance(2 * testRecovery) // past RecoveryTime, within ProbeTimeout
	wantRejected(t, b, "a second probe while the first is within ProbeTimeout")
	b.Done(tk, breaker.Failure)
	if got := b.State(); got != breaker.Open {
		t.Fatalf("after the slow probe failed: state %v, want open", got)
	}
	fc.Advance(testRecovery)
	next, err := b.Allow()
	if err != nil || !next.Probe() {
		t.Fatalf("after another recovery time: ticket %+v, err %v; want a probe", next, err)
	}
	fc.Advance(3 * testRecovery) // the probe is now lost: replaced
	if late, err := b.Allow(); err != nil || !late.Probe() {
		t.Fatalf("after ProbeTimeout: ticket %+v, err %v; want a replacement probe", late, err)
	}
}
