// Package redistest starts real, isolated redis-server processes for tests:
// standalone servers, replicas, a three-sentinel group and Redis Cluster.
//
// It is a thin testing.TB wrapper over internal/redisproc, which does the
// work and returns errors instead (so that the demo can use it too): here a
// failure fails the test, and every process is stopped by t.Cleanup (resumed
// first if it was paused), registered before the process starts, so nothing
// outlives the test that started it.
//
// Every server runs in its own temporary directory on a random loopback port
// below the ephemeral range, so a killed server can later be restarted on the
// same port, and several test binaries can run at once without sharing
// anything. Persistence is off. Readiness is always observed on the server
// (PING, replication link, cluster state, sentinel discovery) rather than
// assumed after a sleep.
//
// Tests skip when redis-server (7.0 or newer) is missing, unless
// REDISGUARD_REQUIRE_SERVER=1, in which case they fail; REDIS_SERVER selects a
// specific binary. The admin clients this package hands out are plain go-redis
// clients with short timeouts: they never go through redisguard, so they can
// observe and steer a server independently of the code under test.
package redistest
