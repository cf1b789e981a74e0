package clock_test

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redisguard/redisguard/internal/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var epoch = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

func TestRealReadsTimeNow(t *testing.T) {
	before := time.Now()
	got := clock.Real().Now()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Fatalf("Real().Now() = %v, want within [%v, %v]", got, before, after)
	}
}

func TestFake(t *testing.T) {
	tests := []struct {
		name  string
		steps func(f *clock.Fake)
		want  time.Time
	}{
		{
			name:  "reads start until moved",
			steps: func(*clock.Fake) {},
			want:  epoch,
		},
		{
			name: "advance accumulates",
			steps: func(f *clock.Fake) {
				f.Advance(time.Second)
				f.Advance(250 * time.Millisecond)
			},
			want: epoch.Add(1250 * time.Millisecond),
		},
		{
			name:  "negative advance moves back",
			steps: func(f *clock.Fake) { f.Advance(-time.Minute) },
			want:  epoch.Add(-time.Minute),
		},
		{
			name: "set replaces the time",
			steps: func(f *clock.Fake) {
				f.Advance(time.Hour)
				f.Set(epoch.Add(time.Second))
			},
			want: epoch.Add(time.Second),
		},
		{
			name: "advance after set starts from the set time",
			steps: func(f *clock.Fake) {
				f.Set(epoch.Add(time.Hour))
				f.Advance(time.Second)
			},
			want: epoch.Add(time.Hour + time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := clock.NewFake(epoch)
			tt.steps(f)
			if got := f.Now(); !got.Equal(tt.want) {
				t.Fatalf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFakeZeroValueReadsZeroTime(t *testing.T) {
	var f clock.Fake
	if got := f.Now(); !got.IsZero() {
		t.Fatalf("zero Fake reads %v, want the zero time", got)
	}
	f.Advance(time.Second)
	if got, want := f.Now(), (time.Time{}).Add(time.Second); !got.Equal(want) {
		t.Fatalf("after Advance: %v, want %v", got, want)
	}
}

// Run with -race: concurrent Advance calls must neither race nor lose updates.
func TestFakeConcurrentAdvance(t *testing.T) {
	const goroutines, steps = 8, 1000
	f := clock.NewFake(epoch)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range steps {
				f.Advance(time.Millisecond)
				_ = f.Now()
			}
		})
	}
	wg.Wait()
	if got, want := f.Now(), epoch.Add(goroutines*steps*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}
