package redisguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// Found by the chaos soak: a blocking call whose context ends while the
// server holds it postponed (CLIENT PAUSE WRITE, or the old master's write
// pause during CLUSTER FAILOVER) got CLIENT UNBLOCK ... TIMEOUT, and Redis
// before redis/redis#14164 (Valkey before valkey-io/valkey#2117) crashed:
// "Guru Meditation: Unknown btype in replyToBlockedClientTimedOut()".
// admission.go now sends UNBLOCK ... ERROR, which those servers survive.
func TestBlockingCancelDuringWritePauseKeepsServerUp(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: time.Second})
	require.NoError(t, c.Ping(testCtx(t, 5*time.Second)).Err())
	require.NoError(t, srv.Admin().Do(testCtx(t, 5*time.Second), "client", "pause", 3000, "write").Err())

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := c.BLPop(ctx, 10*time.Second, "unblock:paused").Err()
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "BLPOP: %v", err)

	time.Sleep(200 * time.Millisecond)
	assert.True(t, srv.Running(), "redis-server exited: CLIENT UNBLOCK crashed it")
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	assert.NoError(t, srv.Admin().Ping(pctx).Err(), "redis-server no longer answers")
}
