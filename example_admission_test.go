package redisguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redisguard/redisguard"
)

// Blocking commands and subscriptions share MaxLongConnections permits, apart
// from the ordinary connections. Here the only permit is held by a
// subscription, so a BLPOP is refused after PoolTimeout instead of taking a
// connection that GETs need; once the subscription closes, it runs.
func ExampleConfig_maxLongConnections() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	c, err := redisguard.NewClient(redisguard.Config{
		Addrs:              []string{srv.Addr()},
		MaxConnections:     4, // per node, for ordinary commands
		MaxLongConnections: 1, // for the whole client: blocking calls and subscriptions
		PoolTimeout:        100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	events := c.Subscribe(ctx, "events")
	if _, err := events.Receive(ctx); err != nil { // subscribed: the permit is taken
		panic(err)
	}
	err = c.BLPop(ctx, time.Second, "jobs").Err()
	fmt.Println("BLPOP while subscribed:", errors.Is(err, redisguard.ErrPoolExhausted))
	fmt.Println("GET meanwhile:", c.Get(ctx, "missing").Err())

	_ = events.Close() // gives the permit back
	_ = c.RPush(ctx, "jobs", "job-1").Err()
	fmt.Println("BLPOP after Close:", c.BLPop(ctx, time.Second, "jobs").Val())

	st := c.Stats()
	fmt.Printf("long permits in use %d of %d, refused %d\n", st.LongInUse, st.MaxLongConnections, st.LongExhaustions)
	// Output:
	// BLPOP while subscribed: true
	// GET meanwhile: redis: nil
	// BLPOP after Close: [jobs job-1]
	// long permits in use 0 of 1, refused 1
}
