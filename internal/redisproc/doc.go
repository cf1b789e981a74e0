// Package redisproc starts and controls real, isolated redis-server
// processes: standalone servers, replicas, a three-sentinel group and Redis
// Cluster, with pause (SIGSTOP), resume, kill and restart for fault
// injection, and slot migration for resharding.
//
// It is the core of internal/redistest, without the testing.TB: every call
// returns an error instead of failing a test, so that programs (the demo)
// can use it too. Whoever starts a server owns it and must Close it;
// Env.OnStart lets a test register that before the process even exists.
//
// Every server runs in its own directory on a random loopback port below the
// ephemeral range, so a killed server can later be restarted on the same
// port, and several programs can run at once without sharing anything.
// Persistence is off. Readiness is always observed on the server (PING,
// replication link, cluster state, sentinel discovery) rather than assumed
// after a sleep. On Linux the kernel kills the servers if their parent dies
// without closing them.
//
// The admin clients this package hands out are plain go-redis clients with
// short timeouts: they never go through redisguard, so they can observe and
// steer a server independently of the code under test.
package redisproc
