package redisguard

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// LogGoRedisTo sends go-redis's own log lines (dial failures, sentinel
// switches, pool notices) to logger, at level, with the attribute
// source=go-redis. go-redis writes them to stderr through one process-wide
// logger; this replaces that logger for every go-redis client in the
// process, which is why redisguard never calls it on its own. A nil logger
// silences go-redis's lines.
func LogGoRedisTo(logger *slog.Logger, level slog.Level) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	redis.SetLogger(goRedisLog{logger, level})
}

type goRedisLog struct {
	l     *slog.Logger
	level slog.Level
}

func (g goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !g.l.Enabled(ctx, g.level) {
		return
	}
	g.l.LogAttrs(ctx, g.level, fmt.Sprintf(format, v...), slog.String("source", "go-redis"))
}
