package redisguard

import (
	"sort"
	"time"
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
}

// NodeStats is one node's breaker.
type NodeStats struct {
	Addr                string    `json:"addr"`
	State               string    `json:"state"` // "closed", "open" or "half-open"
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastTransition      time.Time `json:"last_transition"`
	Opens               uint64    `json:"opens"` // times the breaker opened
}

// Stats returns a snapshot of the client's guard state.
func (c *Client) Stats() Stats {
	var s Stats
	for _, n := range c.nodes.all() {
		snap := n.br.Snapshot()
		s.Nodes = append(s.Nodes, NodeStats{
			Addr:                n.addr,
			State:               snap.State.String(),
			ConsecutiveFailures: snap.ConsecutiveFailures,
			LastTransition:      snap.LastTransition,
			Opens:               snap.Opens,
		})
	}
	sort.Slice(s.Nodes, func(i, j int) bool { return s.Nodes[i].Addr < s.Nodes[j].Addr })
	if t := c.topo; t != nil {
		s.TopologyRefreshes = t.fetches.Load()
		s.TopologyRefreshFailures = t.failures.Load()
		s.LastRefreshDuration = time.Duration(t.lastDur.Load())
	}
	return s
}
