package slotmap

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

func rng(start, end int, addrs ...string) redis.ClusterSlot {
	s := redis.ClusterSlot{Start: start, End: end}
	for _, a := range addrs {
		s.Nodes = append(s.Nodes, redis.ClusterNode{Addr: a})
	}
	return s
}

// Ranges in the order a server may send them (not sorted), one master with
// two ranges, one range without nodes, and a gap.
func sample() []redis.ClusterSlot {
	return []redis.ClusterSlot{
		rng(10923, 16383, "c:1", "c:2"),
		rng(0, 5460, "a:1", "a:2", "a:3"),
		rng(5461, 6000, "b:1"),
		rng(6001, 8000),
		rng(9000, 10922, "a:1", "a:2"),
	}
}

func TestOwner(t *testing.T) {
	m := New(sample())
	for slot, want := range map[int]string{
		0: "a:1", 5460: "a:1", 5461: "b:1", 6000: "b:1",
		6001: "", 8000: "", 8500: "", // a range without nodes, then a gap
		9000: "a:1", 10922: "a:1", 10923: "c:1", 16383: "c:1", 16384: "", -1: "",
	} {
		assert.Equal(t, want, m.Owner(slot), "slot %d", slot)
	}
}

func TestIndexes(t *testing.T) {
	m := New(sample())
	assert.Equal(t, []string{"c:1", "a:1", "b:1"}, m.Masters())
	assert.Equal(t, []string{"c:1", "c:2", "a:1", "a:2", "a:3", "b:1"}, m.Nodes())
	assert.True(t, m.IsMaster("a:1"))
	assert.False(t, m.IsMaster("a:2"))
	assert.Equal(t, "a:1", m.Shard("a:3"))
	assert.Equal(t, "b:1", m.Shard("b:1"))
	assert.Equal(t, "", m.Shard("z:1"))
	assert.Equal(t, []string{"a:2", "a:3"}, m.Replicas("a:1"), "a master's replicas come from its first range")
	assert.Empty(t, m.Replicas("b:1"))
	assert.Nil(t, m.Replicas("a:2"))
	assert.Equal(t, []Range{{0, 5460}, {9000, 10922}}, m.ServedBy("a:1"))
	assert.Nil(t, m.ServedBy("a:2"))
	assert.Equal(t, sample(), m.Slots())
}

func TestNilMapFindsNothing(t *testing.T) {
	var m *Map
	assert.Nil(t, m.Slots())
	assert.Equal(t, "", m.Owner(0))
	assert.Nil(t, m.Masters())
	assert.Nil(t, m.Nodes())
	assert.False(t, m.IsMaster("a:1"))
	assert.Equal(t, "", m.Shard("a:1"))
	assert.Nil(t, m.Replicas("a:1"))
	assert.Nil(t, m.ServedBy("a:1"))
	assert.True(t, m.Same(nil))
	assert.False(t, m.Same(New(sample())))
}

func TestSame(t *testing.T) {
	a := New(sample())
	assert.True(t, a.Same(New(sample())))
	ids := sample()
	ids[0].Nodes[0].ID = "x"
	assert.True(t, a.Same(New(ids)), "only the addresses count")
	moved := sample()
	moved[2] = rng(5461, 6000, "c:1")
	assert.False(t, a.Same(New(moved)), "a range given to another node")
	swapped := sample()
	swapped[1] = rng(0, 5460, "a:2", "a:1", "a:3")
	assert.False(t, a.Same(New(swapped)), "a promotion: the same nodes, another order")
	assert.False(t, a.Same(New(sample()[1:])), "a range fewer")
}

func BenchmarkOwner(b *testing.B) {
	m := New(sample())
	for i := 0; b.Loop(); i++ {
		_ = m.Owner(i & 16383)
	}
}
