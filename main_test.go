package redisguard

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the library starts has an owner that stops it in Close;
// goleak proves it for the whole package.
//
// One go-redis goroutine is ignored by name: after PoolSize failed dials,
// go-redis's pool starts ConnPool.tryDial, which redials once a second and
// notices Close only between those sleeps. Tests that kill servers leave one
// behind for up to a second after Close; it is go-redis's, bounded, and
// stops by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
