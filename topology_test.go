package redisguard

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Cluster mode reports each CLUSTER SLOTS it sends as a started/finished
// pair, and a failure with its cause, never with the password.
func TestRefreshEvents(t *testing.T) {
	const password = "hunter2-Secret"
	srv := miniredis.RunT(t) // answers CLUSTER SLOTS as a one-node cluster
	srv.RequireAuth(password)
	rec := &eventLog{}
	c := newTestClient(t, Config{
		Mode: ModeCluster, Addrs: []string{srv.Addr()}, Password: password,
		OnEvent: rec.onEvent, Logger: rec.logger(),
	})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, []EventKind{EventRefreshStarted, EventRefreshFinished}, rec.kinds())
	events, _ := rec.all()
	assert.Positive(t, events[1].Duration)
	assert.Equal(t, uint64(1), c.Stats().TopologyRefreshes)

	srv.SetError("ERR broken, and by the way the password is " + password)
	time.Sleep(refreshMinInterval + refreshJitter) // let the rate limit pass
	topo := c.topo
	topo.force()
	require.Eventually(t, func() bool {
		k := rec.kinds()
		return len(k) >= 4 && k[len(k)-1] == EventRefreshFailed
	}, 10*time.Second, 10*time.Millisecond)

	events, lines := rec.all()
	failed := events[len(events)-1]
	assert.Equal(t, EventRefreshStarted, events[len(events)-2].Kind)
	assert.Contains(t, failed.Err, "ERR broken")
	assert.Contains(t, failed.Err, "[redacted]")
	assert.Positive(t, failed.Duration)
	for _, e := range events {
		assert.NotContains(t, fmt.Sprintf("%#v", e), password)
	}
	var sawWarn bool
	for _, l := range lines {
		assert.NotContains(t, fmt.Sprint(l), password)
		if l.msg == EventRefreshFailed.message() {
			sawWarn = l.level == slog.LevelWarn
		}
		if l.msg == EventRefreshStarted.message() {
			assert.Equal(t, slog.LevelDebug, l.level)
		}
	}
	assert.True(t, sawWarn, "a failed refresh is logged as a warning")
}
