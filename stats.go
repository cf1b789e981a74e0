package redisguard

import (
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats is a point-in-time snapshot of the client's guard state, for
// dashboards, logs and tests. Obtain it with Client.Stats.
type Stats struct {
	// Nodes holds one entry per node the client has talked to, sorted by
	// address.
	Nodes []NodeStats `json:"nodes"`

	// TopologyRefreshes counts CLUSTER SLOTS calls actually sent to a server
	// (calls answered from the shared, rate-limited map are not counted).
	TopologyRefreshes uint64 `json:"topology_refreshes"`
	// TopologyRefreshFailures counts the refreshes that failed.
	TopologyRefreshFailures uint64 `json:"topology_refresh_failures"`
	// LastRefreshDuration is how long the last refresh took.
	LastRefreshDuration time.Duration `json:"last_refresh_duration_ns"`

	// Divergence counts the decisions taken on commands that ended in a
	// redirect cycle (Cluster mode), by outcome.
	Divergence DivergenceStats `json:"divergence"`

	// MaxConnections is each node's ordinary budget (Config.MaxConnections
	// with its default resolved).
	MaxConnections int `json:"max_connections"`
	// MaxLongConnections is the long budget all nodes share
	// (Config.MaxLongConnections with its default resolved).
	MaxLongConnections int `json:"max_long_connections"`
	// PoolExhaustions counts operations refused with ErrPoolExhausted for
	// want of an ordinary connection, summed over Nodes.
	PoolExhaustions uint64 `json:"pool_exhaustions"`
	// LongInUse is the number of long permits held right now: blocking
	// calls and blocking batches in flight, plus open subscription
	// connections. Calls wait once it reaches MaxLongConnections.
	LongInUse int `json:"long_in_use"`
	// LongExhaustions counts long operations refused with ErrPoolExhausted
	// for want of a long permit.
	LongExhaustions uint64 `json:"long_exhaustions"`

	// SubscriptionMoves counts subscriptions re-established on a new
	// connection after their old one broke or their node stopped answering
	// (EventSubscriptionMoved).
	SubscriptionMoves uint64 `json:"subscription_moves"`
}

// DivergenceStats counts redirect-cycle decisions. A command may be counted
// under Converging several times before it ends in one of the others.
type DivergenceStats struct {
	Converging        uint64 `json:"converging"`          // back-offs while slot ownership converged
	Recovered         uint64 `json:"recovered"`           // commands answered after backing off
	Failover          uint64 `json:"failover"`            // ErrClusterFailover raised
	SlotMapCorruption uint64 `json:"slot_map_corruption"` // ErrSlotMapCorruption raised
}

// NodeStats is one node's breaker.
type NodeStats struct {
	Addr                string    `json:"addr"`
	State               string    `json:"state"` // "closed", "open" or "half-open"
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastTransition      time.Time `json:"last_transition"`
	Opens               uint64    `json:"opens"` // times the breaker opened

	// InFlight is the number of commands and pipelines in progress on the
	// node right now, including those still waiting for capacity: those
	// holding or waiting for a connection of the node's pool (go-redis's
	// PoolStats, each node's in Cluster mode, the master's in Sentinel
	// mode), and its blocking calls. A sick node shows it climbing
	// towards the number of callers.
	InFlight int64 `json:"in_flight"`
	// PoolExhaustions counts operations on the node refused with
	// ErrPoolExhausted.
	PoolExhaustions uint64 `json:"pool_exhaustions"`
	// OutcomeUnknown counts commands on the node that ended with
	// ErrOutcomeUnknown: not safe to repeat, and their connection failed
	// after they may have run.
	OutcomeUnknown uint64 `json:"outcome_unknown"`
	// Probes counts the recovery probes sent to the node while its breaker
	// was open; ProbeFailures counts those that failed.
	Probes        uint64 `json:"probes"`
	ProbeFailures uint64 `json:"probe_failures"`
	// Slow says the node is marked slow (see Config.SlowNodeFactor);
	// Latency is its sampled latency, zero before the first sample.
	Slow    bool          `json:"slow"`
	Latency time.Duration `json:"latency_ns"`
	// ReplicaReads counts the reads the node served as a replica
	// (Config.ReadFrom); commands of a pipeline count one each.
	ReplicaReads uint64 `json:"replica_reads"`
}

// Stats returns a snapshot of the client's guard state.
func (c *Client) Stats() Stats {
	if up := c.current(); up != c {
		return up.Stats()
	}
	var s Stats
	s.Nodes = c.nodes.stats(c.sentinel)
	for _, n := range s.Nodes {
		s.PoolExhaustions += n.PoolExhaustions
	}
	s.MaxConnections = c.cfg.MaxConnections
	s.MaxLongConnections = c.cfg.MaxLongConnections
	s.LongInUse = len(c.adm.permits)
	s.LongExhaustions = c.adm.exhaustions.Load()
	s.SubscriptionMoves = c.subs.moves.Load()
	if t := c.topo; t != nil {
		s.TopologyRefreshes = t.fetches.Load()
		s.TopologyRefreshFailures = t.failures.Load()
		s.LastRefreshDuration = time.Duration(t.lastDur.Load())
	}
	s.Divergence = c.div.stats()
	return s
}

// stats returns the nodes' counters, sorted by address; sm is the
// Sentinel-managed master, nil in the other modes.
func (s *nodeSet) stats(sm *sentinelMaster) []NodeStats {
	var out []NodeStats
	var master *node
	if sm != nil {
		master = sm.node()
	}
	for _, n := range s.all() {
		inFlight := pooled(n.client.Load()) + n.long.Load()
		if n == master {
			inFlight += pooled(sm.client.Load())
		}
		snap := n.br.Snapshot()
		ns := NodeStats{
			Addr:                n.addr,
			State:               snap.State.String(),
			ConsecutiveFailures: snap.ConsecutiveFailures,
			LastTransition:      snap.LastTransition,
			Opens:               snap.Opens,
			InFlight:            inFlight,
			PoolExhaustions:     n.exhaustions.Load(),
			OutcomeUnknown:      n.outcomeUnknowns.Load(),
			Probes:              n.probes.Load(),
			ProbeFailures:       n.probeFailures.Load(),
			Slow:                n.slow.Load(),
			ReplicaReads:        n.replicaReads.Load(),
		}
		if d, _, _, ok := n.lat.Estimate(); ok {
			ns.Latency = d
		}
		out = append(out, ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// pooled is the number of operations holding or waiting for a connection
// of cl's pool: its ordinary operations in flight, commands, pipelines and
// transactions alike, each of which takes one connection for as long as it
// runs (its pipelines have no pool of their own: core.options). The pool
// reads its total and its idle connections one after the other, so a
// connection returned in between is counted in neither or both.
func pooled(cl *redis.Client) int64 {
	if cl == nil {
		return 0
	}
	ps := cl.PoolStats()
	return max(int64(ps.TotalConns)-int64(ps.IdleConns), 0) + int64(ps.PendingRequests)
}
