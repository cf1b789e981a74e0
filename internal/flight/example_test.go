package flight_test

import (
	"context"
	"fmt"

	"github.com/redisguard/redisguard/internal/flight"
)

func Example() {
	var g flight.Group[string, string]
	c, leader := g.Join("answer")
	fmt.Println("the first caller leads:", leader)

	f, leads := g.Join("answer")
	fmt.Println("the second leads:", leads)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	select {
	case <-f.Done():
	case <-ctx.Done():
		fmt.Println("a follower whose context ended stops waiting:", ctx.Err())
	}

	g.End("answer", c, "42") // the leader's result
	<-f.Done()
	fmt.Println("the others get:", f.Val())
	// Output:
	// the first caller leads: true
	// the second leads: false
	// a follower whose context ended stops waiting: context canceled
	// the others get: 42
}
