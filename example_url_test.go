package redisguard_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"

	"github.com/redisguard/redisguard"
)

func ExampleParseURL() {
	cfg, err := redisguard.ParseURL("redis+sentinel://:s3cret@10.0.0.1,10.0.0.2:26380/mymaster/2?dial_timeout=250ms&client_name=checkout")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Mode, cfg.Addrs, cfg.MasterName, cfg.DB, cfg.DialTimeout, cfg.ClientName)
	// Fields the URL leaves out stay zero; NewClient fills in the defaults.
	fmt.Println(cfg.ReadTimeout)

	// A mistake is named, and the password is never quoted.
	_, err = redisguard.ParseURL("rediss://app:s3cret@cache.internal/0?read_timeout=0")
	fmt.Println(err)
	// Output:
	// sentinel [10.0.0.1:26379 10.0.0.2:26380] mymaster 2 250ms checkout
	// 0s
	// redisguard: invalid config: URL parameter read_timeout is zero or negative, which go-redis reads as no timeout; redisguard always bounds it (leave the parameter out for the default)
}

// A service usually keeps its connection string in the environment; the
// parsed Config goes to NewClient unchanged.
func ExampleParseURL_newClient() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	cfg, err := redisguard.ParseURL("redis://" + mr.Addr() + "/0?client_name=example&read_timeout=500ms")
	if err != nil {
		panic(err)
	}
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	if err := c.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
		panic(err)
	}
	fmt.Println(c.Mode(), c.Get(ctx, "greeting").Val())
	// Output: standalone hello
}
