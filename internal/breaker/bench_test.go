package breaker_test

import (
	"testing"

	"github.com/redisguard/redisguard/internal/breaker"
)

// TestClosedPathAllocatesNothing guards the hot path: admitting a call to a
// healthy node and reporting its outcome must not allocate.
func TestClosedPathAllocatesNothing(t *testing.T) {
	for _, o := range []breaker.Outcome{breaker.Success, breaker.Failure, breaker.Neutral} {
		t.Run(o.String(), func(t *testing.T) {
			// A huge threshold keeps the breaker closed however many
			// failures AllocsPerRun makes.
			b := breaker.New(breaker.Settings{Threshold: breaker.MaxThreshold})
			allocs := testing.AllocsPerRun(1000, func() {
				tk, err := b.Allow()
				if err != nil {
					t.Fatal(err)
				}
				b.Done(tk, o)
			})
			if allocs != 0 {
				t.Fatalf("Allow+Done(%v) allocates %v times per call, want 0", o, allocs)
			}
		})
	}
}

func BenchmarkAllowSuccessClosed(b *testing.B) {
	br := breaker.New(breaker.Settings{})
	b.ReportAllocs()
	for b.Loop() {
		tk, err := br.Allow()
		if err != nil {
			b.Fatal(err)
		}
		br.Done(tk, breaker.Success)
	}
}

func BenchmarkAllowSuccessClosedParallel(b *testing.B) {
	br := breaker.New(breaker.Settings{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := br.Allow()
			if err != nil {
				b.Error(err)
				return
			}
			br.Done(tk, breaker.Success)
		}
	})
}

// BenchmarkAllowOpen measures failing fast, the path callers take while a node
// is down: one atomic load.
func BenchmarkAllowOpen(b *testing.B) {
	br := breaker.New(breaker.Settings{Threshold: 1})
	tk, _ := br.Allow()
	br.Done(tk, breaker.Failure)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Allow(); err == nil {
			b.Fatal("open breaker allowed a call")
		}
	}
}
