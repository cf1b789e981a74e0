package redisguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
)

// newNodeSetFixture is a node set of a Cluster-free Config on a fake clock,
// whose probes always fail; it is closed when the test ends.
func newNodeSetFixture(t *testing.T, cfg Config) (*core, *nodeSet) {
	t.Helper()
	resolved, err := cfg.resolve()
	require.NoError(t, err)
	k := newCore(resolved, clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
	s := newNodeSet(k, nil, func(context.Context, string, time.Duration) error { return errors.New("still down") })
	t.Cleanup(s.close)
	return k, s
}

// The components built on a node set hear of every breaker that opens,
// in the order they registered, after the set's own event.
func TestNodeSetTellsItsListenersOfOpenings(t *testing.T) {
	events := &eventLog{}
	_, s := newNodeSetFixture(t, Config{Addrs: []string{"a:1"}, OnEvent: events.onEvent})
	var heard []string
	s.whenOpened(func(n *node) {
		assert.Len(t, events.find(EventBreakerOpened, func(Event) bool { return true }), 1, "a listener ran before the event")
		heard = append(heard, "first "+n.addr)
	})
	s.whenOpened(func(n *node) { heard = append(heard, "second "+n.addr) })
	require.True(t, s.get("a:1").br.Trip())
	assert.Equal(t, []string{"first a:1", "second a:1"}, heard)
	assert.False(t, s.get("a:1").br.Trip(), "an open breaker opened again")
	assert.Len(t, heard, 2, "a listener heard an opening twice")
}

// A node that stands for something other than an address is probed by its
// own probe, every other node by the set's.
func TestNodeSetProbesWithTheRegisteredProbe(t *testing.T) {
	_, s := newNodeSetFixture(t, Config{Addrs: []string{"a:1"}})
	var own []time.Duration
	s.probeWith("role", func(_ context.Context, wait time.Duration) error {
		own = append(own, wait)
		return nil
	})
	ctx := context.Background()
	require.NoError(t, s.probes.probe(ctx, "role", time.Second))
	assert.Equal(t, []time.Duration{time.Second}, own)
	assert.EqualError(t, s.probes.probe(ctx, "a:1", time.Second), "still down")
	assert.Len(t, own, 1, "another address was probed by the role's probe")
}
