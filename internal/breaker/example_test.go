package breaker_test

import (
	"fmt"

	"github.com/redisguard/redisguard/internal/breaker"
)

// A node fails twice and the breaker opens. Its owner probes the node out of
// band; when the node answers, Recover lets traffic through again and the
// first answered call closes the breaker.
func Example() {
	b := breaker.New(breaker.Settings{
		Threshold: 2,
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

	b.Recover() // the owner's probe was answered
	t, _ := b.Allow()
	b.Done(t, breaker.Success)
	fmt.Println(b.State())

	// Output:
	// closed -> open
	// breaker: open
	// open -> half-open
	// half-open -> closed
	// closed
}
