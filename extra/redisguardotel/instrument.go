package redisguardotel

import (
	"slices"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"github.com/redisguard/redisguard"
)

// ClientAttribute names the redisguard.ClientRole of the go-redis client a
// span or a pool metric comes from: ordinary, watch, long, dedicated,
// subscriptions, sharded or replica. A watch client's pool is the ordinary client's, under
// a pool.name of its own ("address/watch"): its points repeat the
// ordinary pool's.
const ClientAttribute = "redisguard.client"

// InstrumentTracing is redisotel.InstrumentTracing for a redisguard client,
// which redisotel refuses ("*redisguard.Client not supported"): it applies
// redisotel's tracing, with opts, through Client.InstrumentRoles to every
// go-redis client c runs for commands, those it builds later included (the
// long client, the dedicated connections of blocking calls). Call it before
// the first command, as with go-redis.
//
// Each span carries ClientAttribute. redisguard's own commands
// (redisguard.IsOwnCommand: health checks' round trips, CLIENT UNBLOCK,
// replicas' lag questions) get no span, nor do the AUTH and HELLO AUTH that
// redisotel leaves out by default; a WithCommandFilter or
// WithCommandsFilter in opts replaces that filter, so call IsOwnCommand in
// yours.
func InstrumentTracing(c *redisguard.Client, opts ...redisotel.TracingOption) error {
	return c.InstrumentRoles(func(rdb redis.UniversalClient, role redisguard.ClientRole) error {
		all := slices.Concat([]redisotel.TracingOption{
			redisotel.WithCommandFilter(skipCommand),
			redisotel.WithCommandsFilter(skipCommands),
		}, opts, []redisotel.TracingOption{redisotel.WithAttributes(attribute.String(ClientAttribute, string(role)))})
		return redisotel.InstrumentTracing(rdb, all...)
	})
}

// skipCommand is redisotel's default filter, and redisguard's own commands.
func skipCommand(cmd redis.Cmder) bool {
	return redisguard.IsOwnCommand(cmd) || redisotel.DefaultCommandFilter(cmd)
}

func skipCommands(cmds []redis.Cmder) bool { return slices.ContainsFunc(cmds, skipCommand) }

// InstrumentMetrics is redisotel.InstrumentMetrics for a redisguard client,
// applied as InstrumentTracing applies tracing. Every pool is reported on
// its own, with ClientAttribute and a pool.name of its own: the node's
// address for the ordinary client (in Cluster mode, each node client's, where
// redisotel names every node's pool after the first seed address), and the
// address followed by "/" and the role for the others, such as
// "10.0.0.1:6379/long". The dedicated clients of one node share their name,
// so their points add up to the node's dedicated connections. In Sentinel
// mode the address of the ordinary, long and dedicated clients is
// go-redis's "FailoverClient". A WithPoolName in opts is overridden.
//
// The client of Watch transactions (redisguard.RoleWatch) is left out: it
// shares the ordinary client's pools, which would be reported twice, so the
// use times of a transaction's commands are not recorded. redisotel's
// metrics have no filter: the use times of redisguard's own commands are
// counted with the pool's, whose connections they use.
func InstrumentMetrics(c *redisguard.Client, opts ...redisotel.MetricsOption) error {
	return c.InstrumentRoles(func(rdb redis.UniversalClient, role redisguard.ClientRole) error {
		if role == redisguard.RoleWatch {
			return nil
		}
		node := func(cl *redis.Client) error {
			name := cl.Options().Addr
			if role != redisguard.RoleOrdinary {
				name += "/" + string(role)
			}
			return redisotel.InstrumentMetrics(cl, slices.Concat(opts, []redisotel.MetricsOption{
				redisotel.WithPoolName(name),
				redisotel.WithAttributes(attribute.String(ClientAttribute, string(role))),
			})...)
		}
		switch rdb := rdb.(type) {
		case *redis.Client:
			return node(rdb)
		case *redis.ClusterClient:
			rdb.OnNewNode(func(cl *redis.Client) {
				if err := node(cl); err != nil {
					otel.Handle(err) // as redisotel reports a node's failure
				}
			})
			return nil
		}
		return redisotel.InstrumentMetrics(rdb, opts...)
	})
}
