package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/faultproxy"
)

// Put the proxy between a client and a healthy server, then switch faults on
// and off at the exact moment a test needs them.
func Example() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	fmt.Println("pass:", c.Ping(ctx).Val())

	_ = p.SetMode(faultproxy.Blackhole) // a hung server: no answer, no error
	var ne net.Error
	err = c.Ping(ctx).Err()
	fmt.Println("blackhole times out:", errors.As(err, &ne) && ne.Timeout())

	_ = p.SetMode(faultproxy.Pass)
	fmt.Println("pass again:", c.Ping(ctx).Val())
	// Output:
	// pass: PONG
	// blackhole times out: true
	// pass again: PONG
}
