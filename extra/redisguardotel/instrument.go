package redisguardotel

import (
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard"
)

// InstrumentTracing is redisotel.InstrumentTracing for a redisguard client,
// which redisotel refuses ("*redisguard.Client not supported"): it applies
// redisotel's tracing, with opts, through Client.Instrument to every go-redis
// client c runs for commands, those it builds later included (the long
// client, the dedicated connections of blocking calls). Call it before the
// first command, as with go-redis.
func InstrumentTracing(c *redisguard.Client, opts ...redisotel.TracingOption) error {
	return c.Instrument(func(rdb redis.UniversalClient) error {
		return redisotel.InstrumentTracing(rdb, opts...)
	})
}

// InstrumentMetrics is redisotel.InstrumentMetrics for a redisguard client,
// applied as InstrumentTracing applies tracing. Each go-redis client reports
// its pool under its own address; redisotel.WithPoolName would give all of
// them one name, so leave it out.
func InstrumentMetrics(c *redisguard.Client, opts ...redisotel.MetricsOption) error {
	return c.Instrument(func(rdb redis.UniversalClient) error {
		return redisotel.InstrumentMetrics(rdb, opts...)
	})
}
