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
//
// So are the standard library's DNS lookups: a dial of a name (the URL and
// fuzz tests' "h") whose context ends leaves net.Resolver's lookup running
// until the resolver's own timeout, where DNS answers slowly.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreAnyFunction("net.(*Resolver).tryOneName"),
		goleak.IgnoreAnyFunction("net.(*Resolver).lookupIPAddr.func1"),
		goleak.IgnoreAnyFunction("net.(*Resolver).lookupIPAddr.func2"))
}
