package redisguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
)

// NewClient takes the place of redis.NewClient (or NewClusterClient, or
// NewFailoverClient): the result is a redis.UniversalClient, so the rest of
// the code does not change.
func ExampleNewClient() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	// One address: the server says whether it is a cluster node (set Mode
	// to skip the question). Several: Cluster. MasterName: Sentinel.
	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		panic(err) // a bad Config, or one address that never answered
	}
	defer c.Close()

	var rdb redis.UniversalClient = c // what existing code already takes
	ctx := context.Background()
	if err := rdb.Set(ctx, "greeting", "hello", time.Minute).Err(); err != nil {
		panic(err)
	}
	fmt.Println(c.Mode(), rdb.Get(ctx, "greeting").Val())
	// Output: standalone hello
}

// When a node stops answering, its breaker opens after
// NodeFailureThreshold failures, and from then on calls for it fail at once
// with ErrNodeUnavailable, inside a *NodeError that names the node. Nothing
// is sent; serve a fallback and move on, and the breaker probes the node by
// itself after NodeRecoveryTime.
func Example_nodeUnavailable() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	c, err := redisguard.NewClient(redisguard.Config{
		Addrs:                []string{srv.Addr()},
		NodeFailureThreshold: 2,
		NodeRecoveryTime:     time.Minute,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	addr := srv.Addr()
	srv.Close() // the server goes away
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		err := c.Get(ctx, "user:42").Err()
		var ne *redisguard.NodeError
		switch {
		case errors.Is(err, redisguard.ErrNodeUnavailable) && errors.As(err, &ne):
			fmt.Printf("call %d: failed fast, without trying; names the node: %v\n", i, ne.Addr == addr)
		case err != nil:
			fmt.Printf("call %d: failed after trying the server\n", i)
		}
	}
	fmt.Println("breaker:", c.Stats().Nodes[0].State)
	// Output:
	// call 1: failed after trying the server
	// call 2: failed after trying the server
	// call 3: failed fast, without trying; names the node: true
	// breaker: open
}

// ErrPoolExhausted means no connection became free within PoolTimeout;
// nothing was sent and nothing was retried. Here the client's only
// connection is held by a WATCH transaction while another call wants one.
func Example_poolExhausted() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	c, err := redisguard.NewClient(redisguard.Config{
		Addrs:          []string{srv.Addr()},
		MaxConnections: 1,
		PoolTimeout:    50 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	err = c.Watch(ctx, func(tx *redis.Tx) error {
		// tx holds the one connection until this function returns.
		err := c.Get(ctx, "other").Err()
		fmt.Println("pool exhausted:", errors.Is(err, redisguard.ErrPoolExhausted))
		return nil
	}, "account:1")
	if err != nil {
		panic(err)
	}
	fmt.Println("counted in Stats:", c.Stats().PoolExhaustions)
	// Output:
	// pool exhausted: true
	// counted in Stats: 1
}

// Stats is a snapshot for dashboards and health pages: one entry per node
// with its breaker, plus budgets and counters.
func ExampleClient_Stats() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}, MaxConnections: 8})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		panic(err)
	}

	st := c.Stats()
	for _, n := range st.Nodes {
		fmt.Printf("node: breaker %s, %d opens, %d in flight, %d pool exhaustions\n",
			n.State, n.Opens, n.InFlight, n.PoolExhaustions)
	}
	fmt.Printf("connections per node: %d; long permits: %d, %d in use\n", st.MaxConnections, st.MaxLongConnections, st.LongInUse)
	// Output:
	// node: breaker closed, 0 opens, 0 in flight, 0 pool exhaustions
	// connections per node: 8; long permits: 8, 0 in use
}

// OnEvent receives breaker transitions, topology refreshes, pool exhaustion
// and divergence decisions as typed values: feed counters and alerts from
// it. It runs on the command's goroutine, so it must not block: count, or
// hand the event over without waiting.
func ExampleConfig_onEvent() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	events := make(chan redisguard.Event, 16)
	c, err := redisguard.NewClient(redisguard.Config{
		Addrs:                []string{srv.Addr()},
		NodeFailureThreshold: 1,
		OnEvent: func(e redisguard.Event) {
			select {
			case events <- e:
			default: // full: drop rather than stall the command
			}
		},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	addr := srv.Addr()
	srv.Close()
	_ = c.Get(context.Background(), "k").Err()
	e := <-events
	fmt.Println(e.Kind, e.Addr == addr)
	// Output: breaker-opened true
}
