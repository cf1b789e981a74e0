package redisguardotel

import (
	"context"
	"errors"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redisguard/redisguard"
)

// events records the client's events. record runs on the goroutine of the
// command that caused the event, so its attribute sets are built once per
// kind and node, and reused.
type events struct {
	total   metric.Int64Counter
	refresh metric.Float64Histogram
	outage  metric.Float64Histogram

	attrs                  []attribute.KeyValue // the user's, on every measurement
	refreshOK, refreshFail metric.MeasurementOption
	outageAt               metric.MeasurementOption
	sets                   sync.Map // eventKey -> metric.MeasurementOption
}

type eventKey struct {
	kind redisguard.EventKind
	addr string
}

func newEvents(m metric.Meter, attrs []attribute.KeyValue) (*events, error) {
	total, err1 := m.Int64Counter("redisguard.events", metric.WithUnit("{event}"),
		metric.WithDescription("Events the client reported, by redisguard.event.kind (breaker-opened, probe-failed, node-slow, pool-exhausted, subscription-moved, ...) and node."))
	refresh, err2 := m.Float64Histogram("redisguard.topology.refresh.duration", metric.WithUnit("s"),
		metric.WithDescription("How long CLUSTER SLOTS refreshes took, by redisguard.refresh.result (ok, failed)."),
		metric.WithExplicitBucketBoundaries(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
	outage, err3 := m.Float64Histogram("redisguard.node.outage.duration", metric.WithUnit("s"),
		metric.WithDescription("How long nodes were out, from the opening of a breaker to its closing."),
		metric.WithExplicitBucketBoundaries(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	with := func(more ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(slices.Concat(attrs, more)...))
	}
	return &events{
		total: total, refresh: refresh, outage: outage, attrs: attrs,
		refreshOK:   with(attribute.String("redisguard.refresh.result", "ok")),
		refreshFail: with(attribute.String("redisguard.refresh.result", "failed")),
		outageAt:    with(),
	}, nil
}

func (ev *events) record(e redisguard.Event) {
	ctx := context.Background()
	k := eventKey{e.Kind, e.Addr}
	at, ok := ev.sets.Load(k)
	if !ok {
		kv := slices.Concat(ev.attrs, []attribute.KeyValue{attribute.String("redisguard.event.kind", e.Kind.String())})
		if e.Addr != "" {
			kv = nodeAttrs(e.Addr, kv...)
		}
		at, _ = ev.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(kv...)))
	}
	ev.total.Add(ctx, 1, at.(metric.MeasurementOption))
	switch e.Kind {
	case redisguard.EventRefreshFinished:
		ev.refresh.Record(ctx, e.Duration.Seconds(), ev.refreshOK)
	case redisguard.EventRefreshFailed:
		ev.refresh.Record(ctx, e.Duration.Seconds(), ev.refreshFail)
	case redisguard.EventBreakerClosed:
		ev.outage.Record(ctx, e.Duration.Seconds(), ev.outageAt)
	}
}
