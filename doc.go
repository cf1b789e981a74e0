// Package redisguard is a drop-in go-redis v9 client that keeps one sick
// Redis node from taking the whole service down with it.
//
// NewClient builds a go-redis standalone, Sentinel (failover) or Cluster
// client from one Config and returns a *Client that satisfies
// redis.UniversalClient. Code that used go-redis switches by changing the
// constructor: Config takes go-redis's own options by their names, and
// ParseURL its URLs (docs/options.md says where each option applies, and
// which few redisguard owns).
//
// Everything redisguard adds is wired in through go-redis's own extension
// points, so go-redis keeps doing what it does well (pooling, redirects,
// pipelining, failover discovery):
//
//   - An outer hook on the client refuses work after Close and translates
//     go-redis's errors into a small documented set (see errors.go).
//   - A hook on each node's client, installed through the per-node
//     constructor (ClusterOptions.NewClient), holds that node's circuit
//     breaker (node.go). Connection failures and timeouts open it; error
//     replies are answers and do not. While it is open, commands for that
//     node fail at once with ErrNodeUnavailable instead of queueing behind a
//     dead socket, and the client probes the node on connections of its own
//     (probe.go); the first answer lets traffic through again. In Sentinel
//     mode the breaker follows the master's address (sentinel.go).
//     The same hook retries a reset connection once, except for commands
//     not known to be safe to repeat (RPUSH, INCR, SET NX, DEL, unknown
//     commands...; repeatable in classify_repeat.go), which end with
//     ErrOutcomeUnknown when they may have run (repeat.go).
//   - In Cluster mode, the same node hook sees every CLUSTER SLOTS that
//     go-redis sends and makes the slot-map refresh single-flight and
//     rate-limited; an opening breaker triggers a refresh, so writes follow a
//     promoted replica promptly.
//   - Blocking commands, blocking batches and subscriptions are classified
//     (classify.go) and run on a separate long budget with connections of
//     their own (admission.go), so they cannot starve ordinary traffic.
//   - Subscriptions are moved off a node whose breaker opens
//     (subscription_move.go): their connections are closed, go-redis
//     subscribes again, and the dial hook (subscription.go) sends classic
//     ones to any healthy node and sharded ones to the slot's owner
//     (subscription_sharded.go). Each move is an event: pub/sub is
//     at-most-once.
//   - A command that go-redis's redirect loop leaves in MOVED or ASK is
//     classified by asking several nodes for the slot's owner
//     (divergence.go): converging, ErrClusterFailover or ErrSlotMapCorruption.
//   - Healthy, Check and the HTTP handlers (health.go) test the operation the
//     service depends on, a write, in one round trip.
//   - With Config.ReadFrom, reads go to replicas (replica.go): with
//     ReadFromMasterPreferred only while the master's breaker is open, so a
//     hung master's data stays readable; replicas have breakers of their
//     own, and MaxReplicaStaleness rules out a replica too far behind
//     (replica_lag.go).
//   - The user's own hooks (Client.AddHook) sit outside all of these and see
//     every command once; go-redis extensions such as redisotel reach every
//     client redisguard runs through Client.Instrument (hooks.go). build.go
//     builds each go-redis client and holds the hook order.
//
// What the guard decides is observable three ways (events.go, stats.go).
// Every decision worth an operator's attention (a breaker opening, going
// half-open or closing, a slot-map refresh starting, finishing or failing, a
// command refused for want of capacity, a contested slot) is an Event: it
// goes to Config.Logger through log/slog, at warn level for what needs
// action, and to Config.OnEvent as a typed value for counters and alerts.
// OnEvent runs synchronously on the goroutine that caused the event, so it
// must be quick; events never carry a password. Client.Stats returns a
// snapshot (per-node breaker state and counters, budgets, refresh and
// divergence counts) that is cheap enough to read on every metrics scrape.
// Exporters live outside the core module; examples/prometheus shows one for
// client_golang, examples/otel one for OpenTelemetry.
//
// A healthy Client runs no background loops. The goroutines it starts are
// owned and stopped by Close: one prober per node whose breaker is open,
// with its probes in flight; in Sentinel mode, the look-up of the master
// while its breaker is open; with ReadFrom, a replica's lag poll while
// reads want it, and in Sentinel mode the look-up of the replicas; the
// CLIENT UNBLOCK sender of a cancelled
// blocking call; the closer of a dedicated connection whose set-up a
// cancellation cut short, which only closes a socket; and the parallel
// slot-ownership queries of a divergence decision, which end before the
// command returns. go-redis's own reload goroutines end by themselves, and
// Close closes every pool, and with them the client-side cache's drainer
// when Config turns the cache on.
package redisguard
