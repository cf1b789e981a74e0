// Package redisguardotel observes a redisguard client with OpenTelemetry.
//
// It has two halves. NewClient stands in for redisguard.NewClient and
// reports redisguard's own signals (breaker states, recovery probes,
// exhausted budgets, outcome-unknown failures, slow marks, slot-map
// refreshes) as metrics: observable instruments read Client.Stats at each
// collection, and counters record the client's events. InstrumentTracing
// and InstrumentMetrics apply go-redis's redisotel to every go-redis client
// the redisguard client runs, for a span and timings per command, each
// labelled with the client's role (ClientAttribute), each pool under a
// name of its own, and no span for redisguard's own commands (health
// checks, CLIENT UNBLOCK; see redisguard.IsOwnCommand):
//
//	client, reg, err := redisguardotel.NewClient(cfg, redisguardotel.WithMeterProvider(mp))
//	if err != nil { ... }
//	defer client.Close()
//	defer reg.Unregister()
//	if err := redisguardotel.InstrumentTracing(client, redisotel.WithTracerProvider(tp)); err != nil { ... }
//
// NewClient builds the client because events arrive through Config.OnEvent,
// which redisguard.NewClient copies: the counters must be in the Config
// before the client exists, and the Stats callback needs the client. One
// call leaves no order to get wrong, and an OnEvent already in the Config is
// kept.
//
// Names follow the OpenTelemetry database-client conventions where they
// have one (db.client.connection.max, db.client.connection.count,
// db.client.connection.timeouts, with db.client.connection.pool.name the
// node's address, or "long" for the budget all nodes share), and are
// redisguard.* otherwise; redisotel's own pool metrics (db.client.connections.*,
// with pool.name) name each go-redis client's pool as InstrumentMetrics
// says. Per-node measurements carry server.address and
// server.port; no attribute is ever derived from credentials.
package redisguardotel

import (
	"net"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/redisguard/redisguard"
)

// ScopeName is the instrumentation scope of the metrics.
const ScopeName = "github.com/redisguard/redisguard/extra/redisguardotel"

// LongPool is the db.client.connection.pool.name of the long budget
// (Config.MaxLongConnections), which all nodes share.
const LongPool = "long"

// Option configures NewClient.
type Option interface{ apply(*config) }

type config struct {
	mp    metric.MeterProvider
	attrs []attribute.KeyValue
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets where the metrics go.
// default: otel.GetMeterProvider()
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithAttributes adds attrs to every measurement: with two clients on one
// MeterProvider, an attribute that names each keeps their series apart.
// default: none
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return optionFunc(func(c *config) { c.attrs = append(c.attrs, attrs...) })
}

// NewClient is redisguard.NewClient with the client's signals reported as
// metrics. Its events are recorded from the first one (those reported while
// NewClient runs included), then handed to cfg.OnEvent if it is set.
// Unregister the returned Registration when the client is closed; it stops
// the instruments that read Client.Stats.
func NewClient(cfg redisguard.Config, opts ...Option) (*redisguard.Client, metric.Registration, error) {
	conf := config{mp: otel.GetMeterProvider()}
	for _, o := range opts {
		o.apply(&conf)
	}
	meter := conf.mp.Meter(ScopeName)
	ev, err := newEvents(meter, conf.attrs)
	if err != nil {
		return nil, nil, err
	}
	next := cfg.OnEvent
	cfg.OnEvent = func(e redisguard.Event) {
		ev.record(e) // first: it cannot panic, next might
		if next != nil {
			next(e)
		}
	}
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	reg, err := observeStats(meter, c, conf.attrs)
	if err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, reg, nil
}

// nodeAttrs names the node addr as the conventions do. An address that is
// not host:port (sentinel-master:<name>) is server.address alone. The slice
// is clipped, so an append to it never writes into another's.
func nodeAttrs(addr string, more ...attribute.KeyValue) []attribute.KeyValue {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil {
		return slices.Clip(slices.Concat([]attribute.KeyValue{semconv.ServerAddress(addr)}, more))
	}
	return slices.Clip(slices.Concat([]attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(port)}, more))
}
