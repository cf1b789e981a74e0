// Package slotmap holds one cluster slot map, as one CLUSTER SLOTS answer
// gave it, with the indexes redisguard looks it up by: the master of a slot,
// the masters, every node, a node's shard and a master's replicas.
//
// A Map is built once per answer and never changes, as go-redis's
// clusterState is, so its readers share it without locks and tell two
// answers apart by pointer. A nil *Map is the map before any answer: every
// look-up finds nothing.
package slotmap

import (
	"slices"

	"github.com/redis/go-redis/v9"
)

// Map is one slot map and its indexes.
type Map struct {
	slots   []redis.ClusterSlot // as the server sent them; shared, never modified
	byStart []int               // indexes into slots, ordered by Start
	masters []string            // each range's first node, once each, in the order of the answer
	nodes   []string            // every node, once each, in the order of the answer
	shard   map[string]string   // node address → the master of its shard (a master's is itself)
	reps    map[string][]string // master address → its replicas, from its first range
}

// Range is a run of slots, both ends included.
type Range struct{ Start, End int }

// New indexes slots, which it keeps and the caller must not modify after.
// A range without nodes serves nobody: it is kept for Slots and owns no
// slot.
func New(slots []redis.ClusterSlot) *Map {
	m := &Map{
		slots:   slots,
		byStart: make([]int, 0, len(slots)),
		shard:   make(map[string]string),
		reps:    make(map[string][]string),
	}
	seen := make(map[string]bool)
	for i, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		m.byStart = append(m.byStart, i)
		master := s.Nodes[0].Addr
		if _, ok := m.reps[master]; !ok {
			m.masters = append(m.masters, master)
			reps := make([]string, 0, len(s.Nodes)-1)
			for _, n := range s.Nodes[1:] {
				reps = append(reps, n.Addr)
			}
			m.reps[master] = reps
		}
		for _, n := range s.Nodes {
			m.shard[n.Addr] = master
			if !seen[n.Addr] {
				seen[n.Addr] = true
				m.nodes = append(m.nodes, n.Addr)
			}
		}
	}
	slices.SortFunc(m.byStart, func(a, b int) int { return slots[a].Start - slots[b].Start })
	return m
}

// Slots returns the answer the map was built from; nil for a nil map. The
// slice is shared and must not be modified.
func (m *Map) Slots() []redis.ClusterSlot {
	if m == nil {
		return nil
	}
	return m.slots
}

// Owner returns the master serving slot, or "" if no range covers it.
func (m *Map) Owner(slot int) string {
	if m == nil {
		return ""
	}
	// The last range starting at or before slot is the only one that can
	// cover it, as ranges do not overlap.
	i, _ := slices.BinarySearchFunc(m.byStart, slot+1, func(idx, target int) int { return m.slots[idx].Start - target })
	if i == 0 {
		return ""
	}
	s := m.slots[m.byStart[i-1]]
	if slot > s.End {
		return ""
	}
	return s.Nodes[0].Addr
}

// Masters returns every master, once each, in the order of the answer.
// The slice is shared and must not be modified.
func (m *Map) Masters() []string {
	if m == nil {
		return nil
	}
	return m.masters
}

// Nodes returns every node, masters and replicas, once each, in the order
// of the answer. The slice is shared and must not be modified.
func (m *Map) Nodes() []string {
	if m == nil {
		return nil
	}
	return m.nodes
}

// IsMaster reports whether addr is the first node of some range.
func (m *Map) IsMaster(addr string) bool {
	if m == nil {
		return false
	}
	_, ok := m.reps[addr]
	return ok
}

// Shard returns the master of addr's shard: addr itself for a master, its
// master for a replica; "" for a node the map does not name.
func (m *Map) Shard(addr string) string {
	if m == nil {
		return ""
	}
	return m.shard[addr]
}

// Replicas returns the replicas of master, as its first range lists them;
// nil for a node that is not a master. The slice is shared and must not be
// modified.
func (m *Map) Replicas(master string) []string {
	if m == nil {
		return nil
	}
	return m.reps[master]
}

// ServedBy returns the ranges addr is master of, ordered by their start.
func (m *Map) ServedBy(addr string) []Range {
	if m == nil {
		return nil
	}
	var out []Range
	for _, i := range m.byStart {
		if s := m.slots[i]; s.Nodes[0].Addr == addr {
			out = append(out, Range{Start: s.Start, End: s.End})
		}
	}
	return out
}

// Same reports whether m and o give every range to the same nodes, in the
// same order. Two nil maps are the same; a nil map and a built one are not.
func (m *Map) Same(o *Map) bool {
	if m == nil || o == nil {
		return m == o
	}
	return slices.EqualFunc(m.slots, o.slots, func(x, y redis.ClusterSlot) bool {
		return x.Start == y.Start && x.End == y.End &&
			slices.EqualFunc(x.Nodes, y.Nodes, func(a, b redis.ClusterNode) bool { return a.Addr == b.Addr })
	})
}
