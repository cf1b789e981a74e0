package background_test

import (
	"context"
	"fmt"

	"github.com/redisguard/redisguard/internal/background"
)

// A component keeps a Group and closes it in its own close: every
// goroutine it started has returned by then.
func Example() {
	var g background.Group
	ticks := make(chan int)
	g.Go(func(ctx context.Context) {
		for i := 0; ; i++ {
			select {
			case ticks <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	fmt.Println(<-ticks, <-ticks)
	g.Close()
	fmt.Println(g.Go(func(context.Context) {}))
	// Output:
	// 0 1
	// false
}
