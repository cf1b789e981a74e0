package redisguard

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
)

// go-redis's process-wide log lines reach the given slog.Logger, marked as
// go-redis's, at the given level; nothing reaches it below the handler's
// level.
func TestLogGoRedisTo(t *testing.T) {
	t.Cleanup(logging.Enable) // restore go-redis's default for the other tests
	var buf bytes.Buffer
	LogGoRedisTo(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), slog.LevelWarn)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err() // go-redis logs the failed dial
	out := buf.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "source=go-redis")
	assert.Contains(t, out, "127.0.0.1:1")

	buf.Reset()
	LogGoRedisTo(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})), slog.LevelWarn)
	_ = c.Ping(context.Background()).Err()
	assert.Empty(t, strings.TrimSpace(buf.String()), "a line below the handler's level got through")
}
