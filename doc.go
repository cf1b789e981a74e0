// Package redisguard is a drop-in go-redis v9 client that keeps one sick
// Redis node from taking the whole service down with it.
//
// NewClient builds a go-redis standalone, Sentinel (failover) or Cluster
// client from one Config and returns a *Client that satisfies
// redis.UniversalClient. Code that used go-redis switches by changing the
// constructor: Config takes go-redis's own options by their names, and
// ParseURL its URLs.
//
// What changes is how commands fail. Each node has a circuit breaker:
// a node that fails, or goes silent for HungNodeAfter, is answered for at
// once with ErrNodeUnavailable while the client probes it, and traffic
// resumes with its first answer. A command not known to be safe to repeat
// is never sent twice: when it may have run, it ends with
// ErrOutcomeUnknown. Replies that say a command did not run (CLUSTERDOWN,
// LOADING, READONLY from the master...) are waited out within the caller's
// deadline. Blocking calls and subscriptions run on a budget of their own,
// subscriptions follow their node's failover, and Healthy and
// ReadinessHandler check the write path a service depends on.
//
// Everything is wired in through go-redis's own extension points (hooks,
// the per-node client constructor, the dialer), so go-redis keeps doing
// pooling, redirects, pipelining and failover discovery, and go-redis's
// hooks and extensions keep working (Client.AddHook, Client.Instrument).
// Every error a caller sees is the caller's context error, a reply from
// Redis, or one of the errors in errors.go.
//
// The README says how to use it; docs/architecture.md how it is built.
package redisguard
