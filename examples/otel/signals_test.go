package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/redistest"
)

// telemetry is an in-memory OTel pipeline: every ended span, and metrics
// on demand.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tel := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	t.Cleanup(func() {
		_ = tel.tp.Shutdown(context.Background())
		_ = tel.mp.Shutdown(context.Background())
	})
	return tel
}

// spanNames counts the ended spans by name.
func (tel *telemetry) spanNames() map[string]int {
	names := map[string]int{}
	for _, s := range tel.spans.Ended() {
		names[s.Name()]++
	}
	return names
}

// collect returns every data point's value by metric name and attributes
// ("name{k=v,...}"); histograms give their count.
func (tel *telemetry) collect(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += float64(p.Count)
				}
			}
		}
	}
	return out
}

// sumOf adds up the points of the metric called name.
func sumOf(points map[string]float64, name string) float64 {
	total := 0.0
	for k, v := range points {
		if strings.HasPrefix(k, name+"{") {
			total += v
		}
	}
	return total
}

// GET, BLPOP (run on a dedicated connection) and pipelines each get a span
// through Instrument, and redisotel's timings cover them, in standalone and
// cluster alike.
func TestSpansForEveryCommand(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		checkSpans(t, redisguard.Config{Addrs: []string{srv.Addr}})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		checkSpans(t, redisguard.Config{Addrs: cl.Addrs(), Mode: redisguard.ModeCluster})
	})
}

func checkSpans(t *testing.T, cfg redisguard.Config) {
	tel := newTelemetry(t)
	c, reg, err := setup(cfg, tel.tp, tel.mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister(); _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	if err := c.Set(ctx, "otel:{k}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "otel:{k}").Result(); err != nil || v != "v" {
		t.Fatalf("GET: %q, %v", v, err)
	}
	if err := c.BLPop(ctx, 10*time.Millisecond, "otel:{q}").Err(); err != redis.Nil {
		t.Fatalf("BLPOP: %v, want redis.Nil", err)
	}
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "otel:{k}")
		p.Incr(ctx, "otel:{k}:n")
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	names := tel.spanNames()
	for _, want := range []string{"get", "blpop", "redis.pipeline get incr"} {
		if names[want] != 1 {
			t.Errorf("%d spans named %q, want 1; spans: %v", names[want], want, names)
		}
	}
	points := tel.collect(t)
	if n := sumOf(points, "db.client.connections.use_time"); n < 4 {
		t.Errorf("redisotel timed %v operations, want at least 4 (SET, GET, BLPOP, pipeline)", n)
	}
	if n := sumOf(points, "redisguard.node.breaker.state"); n < 1 {
		t.Errorf("no node reports a breaker state: %v", points)
	}
}

// redisguard's own signals become metrics: a killed server opens its
// breaker (state gauge and event counter), and recovery probes are counted.
func TestGuardSignals(t *testing.T) {
	srv := redistest.StartServer(t)
	tel := newTelemetry(t)
	c, reg, err := setup(redisguard.Config{
		Addrs: []string{srv.Addr}, NodeFailureThreshold: 2, NodeRecoveryTime: 50 * time.Millisecond,
	}, tel.tp, tel.mp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Unregister(); _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	closed := "redisguard.node.breaker.state{node=" + srv.Addr + ",state=closed}"
	points := tel.collect(t)
	if v := points[closed]; v != 1 {
		t.Fatalf("%s = %v, want 1", closed, v)
	}
	slow := "redisguard.node.slow{node=" + srv.Addr + "}"
	if v, ok := points[slow]; !ok || v != 0 {
		t.Fatalf("%s = %v (reported %v), want 0", slow, v, ok)
	}
	if _, ok := points["redisguard.node.latency{node="+srv.Addr+"}"]; !ok {
		t.Fatalf("no latency gauge for %s", srv.Addr)
	}

	srv.Kill(t)
	var last error
	for i := 0; i < 10 && !errors.Is(last, redisguard.ErrNodeUnavailable); i++ {
		last = c.Get(ctx, "k").Err()
	}
	if !errors.Is(last, redisguard.ErrNodeUnavailable) {
		t.Fatalf("GET on a killed server: %v, want ErrNodeUnavailable", last)
	}
	open := "redisguard.node.breaker.state{node=" + srv.Addr + ",state=open}"
	opened := "redisguard.events{budget=,kind=breaker-opened}"
	probes := "redisguard.node.probes{node=" + srv.Addr + "}"
	redistest.WaitFor(t, 10*time.Second, "a recovery probe counted", func() error {
		points := tel.collect(t)
		if points[open] != 1 || points[opened] < 1 || points[probes] < 1 {
			return errors.New("not yet: " + open + ", " + opened + ", " + probes)
		}
		return nil
	})
}
