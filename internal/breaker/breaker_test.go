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

const testThreshold = 3

// newTestBreaker returns a breaker with threshold 3 on a fake clock,
// recording its transitions.
func newTestBreaker() (*breaker.Breaker, *clock.Fake, *recorder) {
	fc := clock.NewFake(epoch)
	rec := &recorder{}
	b := breaker.New(breaker.Settings{Threshold: testThreshold, Clock: fc, OnStateChange: rec.record})
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

// halfOpen opens the breaker and recovers it.
func halfOpen(t *testing.T, b *breaker.Breaker) {
	t.Helper()
	trip(t, b)
	if !b.Recover() {
		t.Fatal("Recover() on an open breaker = false")
	}
}

func wantRejected(t *testing.T, b *breaker.Breaker, why string) {
	t.Helper()
	if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("%s: Allow() error = %v, want ErrOpen", why, err)
	}
}

func wantState(t *testing.T, b *breaker.Breaker, want breaker.State, why string) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("%s: state %v, want %v", why, got, want)
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

// TestThreshold checks the documented defaults by behaviour: how many
// failures open the breaker.
func TestThreshold(t *testing.T) {
	tests := []struct {
		name          string
		settings      breaker.Settings
		wantThreshold int
	}{
		{"zero settings", breaker.Settings{}, breaker.DefaultThreshold},
		{"explicit", breaker.Settings{Threshold: 2}, 2},
		{"threshold one", breaker.Settings{Threshold: 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := breaker.New(tt.settings)
			for range tt.wantThreshold - 1 {
				call(t, b, breaker.Failure)
			}
			wantState(t, b, breaker.Closed, "one failure short")
			call(t, b, breaker.Failure)
			wantState(t, b, breaker.Open, "at the threshold")
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

// An open breaker has no timer: however long it waits, only Recover lets
// traffic through again.
func TestOpenStaysOpenUntilRecover(t *testing.T) {
	b, fc, _ := newTestBreaker()
	trip(t, b)
	for _, d := range []time.Duration{0, time.Second, time.Hour, 1000 * time.Hour} {
		fc.Advance(d)
		wantRejected(t, b, "open, "+d.String()+" later")
		wantState(t, b, breaker.Open, "open, "+d.String()+" later")
	}
	if !b.Recover() {
		t.Fatal("Recover() = false on an open breaker")
	}
	wantState(t, b, breaker.HalfOpen, "after Recover")
}

func TestRecoverOnlyMovesAnOpenBreaker(t *testing.T) {
	b, _, rec := newTestBreaker()
	if b.Recover() {
		t.Fatal("Recover() on a closed breaker = true")
	}
	halfOpen(t, b)
	if b.Recover() {
		t.Fatal("Recover() on a half-open breaker = true")
	}
	want := []transition{{breaker.Closed, breaker.Open}, {breaker.Open, breaker.HalfOpen}}
	if got := rec.transitions(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestHalfOpen(t *testing.T) {
	tests := []struct {
		name string
		// outcomes are reported for tickets all taken while half-open.
		outcomes []breaker.Outcome
		want     breaker.State
	}{
		{"first success closes", []breaker.Outcome{breaker.Success}, breaker.Closed},
		{"first failure reopens", []breaker.Outcome{breaker.Failure}, breaker.Open},
		{"neutral changes nothing", []breaker.Outcome{breaker.Neutral, breaker.Neutral}, breaker.HalfOpen},
		{"success then a late failure stays closed", []breaker.Outcome{breaker.Success, breaker.Failure}, breaker.Closed},
		{"failure then a late success stays open", []breaker.Outcome{breaker.Failure, breaker.Success}, breaker.Open},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _, _ := newTestBreaker()
			halfOpen(t, b)
			tickets := make([]breaker.Ticket, len(tt.outcomes))
			for i := range tickets {
				var err error
				if tickets[i], err = b.Allow(); err != nil {
					t.Fatalf("Allow() #%d while half-open: %v", i, err)
				}
			}
			for i, o := range tt.outcomes {
				b.Done(tickets[i], o)
			}
			wantState(t, b, tt.want, "after the outcomes")
		})
	}
}

func TestStaleResultsAreDropped(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, b *breaker.Breaker)
	}{
		{
			name: "closed-era failure after recovery does not count",
			run: func(t *testing.T, b *breaker.Breaker) {
				old, _ := b.Allow()
				halfOpen(t, b)
				call(t, b, breaker.Success)
				b.Done(old, breaker.Failure)
				if s := b.Snapshot(); s.State != breaker.Closed || s.ConsecutiveFailures != 0 {
					t.Fatalf("state %v with %d failures, want closed with 0", s.State, s.ConsecutiveFailures)
				}
			},
		},
		{
			name: "closed-era success does not close a half-open breaker",
			run: func(t *testing.T, b *breaker.Breaker) {
				old, _ := b.Allow()
				halfOpen(t, b)
				b.Done(old, breaker.Success)
				wantState(t, b, breaker.HalfOpen, "after a stale success")
			},
		},
		{
			name: "closed-era failure does not reopen a half-open breaker",
			run: func(t *testing.T, b *breaker.Breaker) {
				old, _ := b.Allow()
				halfOpen(t, b)
				b.Done(old, breaker.Failure)
				if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Opens != 1 {
					t.Fatalf("state %v after %d opens; want half-open after 1", s.State, s.Opens)
				}
			},
		},
		{
			name: "closed-era success does not reset a later run of failures",
			run: func(t *testing.T, b *breaker.Breaker) {
				old, _ := b.Allow()
				halfOpen(t, b)
				call(t, b, breaker.Success)
				call(t, b, breaker.Failure)
				call(t, b, breaker.Failure)
				b.Done(old, breaker.Success)
				if s := b.Snapshot(); s.ConsecutiveFailures != 2 {
					t.Fatalf("ConsecutiveFailures = %d, want 2", s.ConsecutiveFailures)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _, _ := newTestBreaker()
			tt.run(t, b)
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
	if b.Recover() {
		t.Fatal("Recover() on a disabled breaker = true")
	}
	fc.Advance(time.Hour)
	want := breaker.Snapshot{State: breaker.Closed, LastTransition: epoch}
	if got := b.Snapshot(); got != want {
		t.Fatalf("Snapshot() = %+v, want %+v", got, want)
	}
	wantState(t, b, breaker.Closed, "disabled")
	if got := rec.transitions(); len(got) != 0 {
		t.Fatalf("OnStateChange called %v", got)
	}
}

func TestOnStateChange(t *testing.T) {
	b, _, rec := newTestBreaker()
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
	b.Recover()
	step("recovered", transition{breaker.Open, breaker.HalfOpen})
	call(t, b, breaker.Neutral)
	step("neutral changes no state")
	call(t, b, breaker.Failure)
	step("failed while half-open", transition{breaker.HalfOpen, breaker.Open})
	b.Recover()
	call(t, b, breaker.Success)
	step("answered while half-open", transition{breaker.Open, breaker.HalfOpen}, transition{breaker.HalfOpen, breaker.Closed})
}

// The callback runs outside the lock, so it may call back into the breaker.
// Were it called under the lock, this test would deadlock.
func TestOnStateChangeMayCallBreaker(t *testing.T) {
	var (
		b    *breaker.Breaker
		seen []breaker.State
	)
	b = breaker.New(breaker.Settings{
		Threshold: 1,
		OnStateChange: func(_, to breaker.State) {
			seen = append(seen, b.Snapshot().State)
			if to == breaker.Open {
				b.Recover()
			}
		},
	})
	call(t, b, breaker.Failure)
	if want := []breaker.State{breaker.Open, breaker.HalfOpen}; !slices.Equal(seen, want) {
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
	want("tripped", breaker.Snapshot{State: breaker.Open, LastTransition: opened, OpenedAt: opened, Opens: 1})

	fc.Advance(time.Second)
	b.Recover()
	recovered := opened.Add(time.Second)
	want("recovered", breaker.Snapshot{State: breaker.HalfOpen, LastTransition: recovered, OpenedAt: opened, Opens: 1})

	fc.Advance(time.Second)
	call(t, b, breaker.Failure)
	reopened := recovered.Add(time.Second)
	want("failed again: still out since the first opening",
		breaker.Snapshot{State: breaker.Open, LastTransition: reopened, OpenedAt: opened, Opens: 2})

	fc.Advance(time.Second)
	b.Recover()
	call(t, b, breaker.Success)
	closed := reopened.Add(time.Second)
	want("closed", breaker.Snapshot{State: breaker.Closed, LastTransition: closed, OpenedAt: opened, Opens: 2})
}

func TestTrip(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, b *breaker.Breaker)
		opens bool
	}{
		{"closed with no failures", func(*testing.T, *breaker.Breaker) {}, true},
		{"closed with some failures", func(t *testing.T, b *breaker.Breaker) { call(t, b, breaker.Failure) }, true},
		{"half-open", halfOpen, true},
		{"open already", trip, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, fc, rec := newTestBreaker()
			tt.setup(t, b)
			before := b.Snapshot()
			old, _ := b.Allow()
			fc.Advance(time.Second)
			if got := b.Trip(); got != tt.opens {
				t.Fatalf("Trip() = %v, want %v", got, tt.opens)
			}
			wantState(t, b, breaker.Open, "after Trip")
			wantRejected(t, b, "after Trip")
			if !tt.opens {
				if got := b.Snapshot(); got != before {
					t.Fatalf("Trip on an open breaker changed it: %+v, was %+v", got, before)
				}
				return
			}
			got := rec.transitions()
			if last := got[len(got)-1]; last.to != breaker.Open {
				t.Fatalf("last transition %v, want one to open", last)
			}
			snap := b.Snapshot()
			if snap.Opens != before.Opens+1 {
				t.Fatalf("Opens = %d, want %d", snap.Opens, before.Opens+1)
			}
			if before.State == breaker.Closed && !snap.OpenedAt.Equal(epoch.Add(time.Second)) {
				t.Fatalf("OpenedAt = %v, want the time of the trip", snap.OpenedAt)
			}
			// A call admitted before the trip reports into an older
			// generation: its success does not close the breaker.
			b.Done(old, breaker.Success)
			wantState(t, b, breaker.Open, "after a success admitted before the trip")
		})
	}
}

func TestTripDisabled(t *testing.T) {
	b := breaker.New(breaker.Settings{Threshold: -1})
	if b.Trip() {
		t.Fatal("Trip() on a disabled breaker = true")
	}
	wantState(t, b, breaker.Closed, "disabled, after Trip")
}

func TestConfirm(t *testing.T) {
	b, _, rec := newTestBreaker()
	if b.Confirm() {
		t.Fatal("Confirm() on a closed breaker = true")
	}
	trip(t, b)
	if b.Confirm() {
		t.Fatal("Confirm() on an open breaker = true")
	}
	wantState(t, b, breaker.Open, "Confirm on an open breaker")
	if !b.Recover() {
		t.Fatal("Recover() = false")
	}
	old, _ := b.Allow()
	if !b.Confirm() {
		t.Fatal("Confirm() on a half-open breaker = false")
	}
	wantState(t, b, breaker.Closed, "after Confirm")
	want := []transition{{breaker.Closed, breaker.Open}, {breaker.Open, breaker.HalfOpen}, {breaker.HalfOpen, breaker.Closed}}
	if got := rec.transitions(); !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	// A failure admitted while half-open belongs to the earlier state.
	b.Done(old, breaker.Failure)
	wantState(t, b, breaker.Closed, "a half-open call's failure after Confirm")
}
