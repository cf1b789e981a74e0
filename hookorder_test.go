package redisguard

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hook order every client is built with is the table newGoRedis
// installs from; testdata/hook-order.txt prints it, so a change of order
// shows in review. REDISGUARD_UPDATE_GOLDEN=1 writes the file anew.
func TestHookOrderGolden(t *testing.T) {
	path := filepath.Join("testdata", "hook-order.txt")
	got := hookOrderText()
	if os.Getenv("REDISGUARD_UPDATE_GOLDEN") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), got, "the hook order changed: review it, then run with REDISGUARD_UPDATE_GOLDEN=1")
}

// Every client kind a Client builds has one chain in each mode it is built
// in, and the layers that hand the caller's commands on run in one order:
// the user's hooks outermost, the guard inside every cluster-level hook,
// extensions innermost.
func TestHookOrderIsOneTable(t *testing.T) {
	seen := map[[4]int]bool{}
	for _, ch := range hookOrder {
		key := [4]int{int(ch.kind), int(ch.mode), int(ch.level), map[bool]int{false: 0, true: 1}[ch.pending]}
		assert.False(t, seen[key], "two chains for %s in %s mode", ch.kind, ch.mode)
		seen[key] = true
		for i, l := range ch.layers {
			if l == layerUser || l == layerUserDials {
				assert.Zero(t, i, "%s %s: the user's hooks are not outermost", ch.kind, ch.mode)
			}
			if l == layerExtensions {
				assert.Equal(t, len(ch.layers)-1, i, "%s %s: extensions are not innermost", ch.kind, ch.mode)
			}
		}
	}
	for _, mode := range []Mode{ModeStandalone, ModeSentinel, ModeCluster} {
		for _, kind := range []clientKind{clientOrdinary, clientLong, clientSubscriptions, clientDedicated, clientProbe, clientSentinelQuestion} {
			assert.NotPanics(t, func() { chainOf(kind, mode, levelClient, false) }, "%s in %s mode", kind, mode)
		}
	}
	assert.NotPanics(t, func() { chainOf(clientOrdinary, ModeCluster, levelNode, false) })
	assert.NotPanics(t, func() { chainOf(clientSharded, ModeCluster, levelNode, false) })
	assert.NotPanics(t, func() { chainOf(clientSubscriptions, ModeCluster, levelNode, false) })
	for _, mode := range []Mode{ModeStandalone, ModeSentinel} {
		assert.NotPanics(t, func() { chainOf(clientWatch, mode, levelClient, false) }, "watch in %s mode", mode)
	}
	assert.Panics(t, func() { chainOf(clientWatch, ModeCluster, levelClient, false) }, "a cluster Tx runs on a node client")
	assert.NotPanics(t, func() { chainOf(clientWatch, ModeCluster, levelTx, false) }, "a cluster Tx's own layer")
	assert.Panics(t, func() { chainOf(clientSharded, ModeStandalone, levelClient, false) }, "sharded clients are Cluster mode's")
}
