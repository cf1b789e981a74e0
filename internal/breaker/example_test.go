package breaker_test

import (
	"fmt"
	"time"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
)

// A node fails twice, the breaker opens, and after the recovery time one probe
// finds the node healthy again.
func Example() {
	fc := clock.NewFake(time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC))
	b := breaker.New(breaker.Settings{
		Threshold:    2,
		RecoveryTime: time.Second,
		Clock:        fc,
		OnStateChange: func(from, to breaker.State) {
			fmt.Println(from, "->", to)
		},
	})

	for range 2 {
		t, _ := b.Allow()
		b.Done(t, breaker.Failure) // for example, a dial timeout
	}
	_, err := b.Allow()
	fmt.Println(err)

	fc.Advance(time.Second)
	t, _ := b.Allow()
	fmt.Println("probe:", t.Probe())
	_, err = b.Allow()
	fmt.Println("while probing:", err)
	b.Done(t, breaker.Success)
	fmt.Println(b.State())

	// Output:
	// closed -> open
	// breaker: open
	// open -> half-open
	// probe: true
	// while probing: breaker: open
	// half-open -> closed
	// closed
}
