package redisguardotel_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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

// point names a data point as collect does: "name{k=v,...}", attributes in
// key order.
func point(name string, kv ...attribute.KeyValue) string {
	return key(name, attribute.NewSet(kv...))
}

func key(name string, set attribute.Set) string {
	var kv []string
	for _, a := range set.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.Emit())
	}
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// collect returns every data point's value by point name; a histogram gives
// its count, and its sum under name+".sum".
func (tel *telemetry) collect(t *testing.T) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
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
					out[key(m.Name+".sum", p.Attributes)] += p.Sum
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

// expect checks exact values, and that a point given with want < 0 is
// absent.
func expect(t *testing.T, got, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := got[k]
		switch {
		case want[k] < 0 && ok:
			t.Errorf("%s = %v, want no such point", k, v)
		case want[k] >= 0 && !ok:
			t.Errorf("%s missing", k)
		case want[k] >= 0 && v != want[k]:
			t.Errorf("%s = %v, want %v", k, v, want[k])
		}
	}
}
