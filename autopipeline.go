package redisguard

import (
	"github.com/redis/go-redis/v9"
)

// AutoPipelineWithOptions is go-redis's AutoPipelineWithOptions, behind the
// guards as every autopipelined batch is, refusing FullDuplex (see
// refuseFullDuplex).
func (c *Client) AutoPipelineWithOptions(config *redis.AutoPipelineOptions) (*redis.AutoPipeliner, error) {
	if err := refuseFullDuplex("AutoPipelineWithOptions", config); err != nil {
		return nil, err
	}
	return c.current().UniversalClient.AutoPipelineWithOptions(config)
}

// AsyncAutoPipelineWithOptions is go-redis's AsyncAutoPipelineWithOptions,
// refusing FullDuplex as AutoPipelineWithOptions does.
func (c *Client) AsyncAutoPipelineWithOptions(config *redis.AutoPipelineOptions) (*redis.AutoPipeliner, error) {
	if err := refuseFullDuplex("AsyncAutoPipelineWithOptions", config); err != nil {
		return nil, err
	}
	return c.current().UniversalClient.AsyncAutoPipelineWithOptions(config)
}

// refuseFullDuplex returns an ErrInvalidConfig naming where if config asks
// for go-redis's full-duplex autopipeline. On that path go-redis queues a
// command's write before it runs the hooks, so no hook, the node guard's
// included, can stop it: an open breaker could not refuse a command before
// it reached the node. It also needs a pipeline pool, which redisguard does
// not run (PipelinePoolSize), and without one go-redis quietly runs half
// duplex.
func refuseFullDuplex(where string, config *redis.AutoPipelineOptions) error {
	if config == nil || !config.FullDuplex {
		return nil
	}
	return invalid(where, "asks for FullDuplex: go-redis writes a full-duplex command before any hook runs, so an open breaker could not refuse it, and it needs a pipeline pool redisguard does not run; leave FullDuplex false (the half-duplex autopipeline runs behind the guards)")
}
