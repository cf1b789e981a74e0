package redisguard

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// Found by the chaos soak in CI: "redis: can't parse int reply: "*2"" on a
// BLPOP. CLIENT UNBLOCK ... ERROR on a call the server has postponed (a
// write pause) answers -UNBLOCKED, but Redis 7.0 keeps the command and runs
// it when the pause ends: a second reply for one command. The connection was
// reused, so the next call read the old BLPOP's reply, and the element the
// old BLPOP popped was lost. A connection on which CLIENT UNBLOCK was sent is
// now closed instead, which also makes the server drop the postponed
// command before it runs.
func TestCancelledPostponedBlockingCallLeavesNoReplyBehind(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: time.Second, MaxLongConnections: 1,
		ClientName: "unblock-postponed"})
	ctx := testCtx(t, 20*time.Second)
	require.NoError(t, srv.Admin().RPush(ctx, "unblock:queue", "a").Err())
	// One dedicated connection, warmed up: every blocking call below uses it.
	require.ErrorIs(t, c.BLPop(ctx, 100*time.Millisecond, "unblock:warm").Err(), redis.Nil)

	require.NoError(t, srv.Admin().Do(ctx, "client", "pause", 1500, "write").Err())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.BLPop(short, 10*time.Second, "unblock:queue").Err()
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the postponed BLPOP, cancelled")
	// The kill normally lands before BLPop returns; on a loaded machine it
	// may finish in the background. Either way the connection that carried
	// the BLPOP must be gone, and its held command with it, before the
	// pause ends.
	redistest.WaitFor(t, 5*time.Second, "the cancelled call's connection to be killed", func() error {
		list, err := srv.Admin().ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name=unblock-postponed ") && strings.Contains(line, " cmd=blpop ") {
				return errors.New("the BLPOP's connection is still open: " + line)
			}
		}
		return nil
	})

	// The pause ends; a postponed command still held by the server would
	// now pop "a" and send its reply down the connection.
	require.NoError(t, srv.Admin().Do(ctx, "client", "unpause").Err())
	time.Sleep(200 * time.Millisecond)
	got, err := c.BLPop(ctx, 100*time.Millisecond, "unblock:other").Result()
	assert.ErrorIs(t, err, redis.Nil, "the next blocking call read someone else's reply: %v", got)
	n, err := srv.Admin().LLen(ctx, "unblock:queue").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the cancelled BLPOP popped the element after all, and its reply was lost")
}
