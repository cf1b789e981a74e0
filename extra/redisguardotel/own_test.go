package redisguardotel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardotel"
	"github.com/redisguard/redisguard/internal/redistest"
)

// A health check's round trips are redisguard's own commands: they get no
// span, while the service's commands do; and the pools of the ordinary, long
// and dedicated clients of one address are reported under names of their
// own, each with its own size.
func TestOwnCommandsAndPoolsToldApart(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.StartServer(t)
		tel, c := instrumented(t, redisguard.Config{Addrs: []string{srv.Addr}, MaxConnections: 7, MaxLongConnections: 3})
		exercise(t, c)
		checkOwnSpans(t, tel, "ping", "set")
		points := tel.collect(t)
		expect(t, points, map[string]float64{
			poolPoint(srv.Addr, "ordinary"):                                         7,
			poolPoint(srv.Addr+"/long", "long"):                                     2*3 + 1,
			poolPoint(srv.Addr+"/dedicated", "dedicated"):                           1,
			"db.client.connections.max{db.system=redis,pool.name=" + srv.Addr + "}": -1,
			// The Watch client shares the ordinary pool: reported once.
			poolPoint(srv.Addr+"/watch", "watch"): -1,
		})
	})
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		tel, c := instrumented(t, redisguard.Config{MasterName: s.MasterName, Addrs: s.Addrs(), MaxConnections: 7, MaxLongConnections: 3})
		exercise(t, c)
		checkOwnSpans(t, tel, "ping", "set")
		// go-redis's failover client, and the dedicated clients built
		// from its options, are at "FailoverClient".
		expect(t, tel.collect(t), map[string]float64{
			poolPoint("FailoverClient", "ordinary"):            7,
			poolPoint("FailoverClient/long", "long"):           2*3 + 1,
			poolPoint("FailoverClient/dedicated", "dedicated"): 1,
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
		tel, c := instrumented(t, redisguard.Config{Addrs: cl.Addrs(), Mode: redisguard.ModeCluster, MaxConnections: 7, MaxLongConnections: 3})
		exercise(t, c)
		checkOwnSpans(t, tel, "redis.pipeline ping cluster info set")
		points := tel.collect(t)
		for _, addr := range cl.Addrs() {
			expect(t, points, map[string]float64{poolPoint(addr, "ordinary"): 7})
		}
		if n := points[poolPoint(cl.Addrs()[0], "ordinary")]; n != 7 {
			t.Errorf("the first seed's ordinary pool reads %v, want 7 (one node's pool)", n)
		}
	})
}

func instrumented(t *testing.T, cfg redisguard.Config) (*telemetry, *redisguard.Client) {
	t.Helper()
	tel := newTelemetry(t)
	c, err := redisguard.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := redisguardotel.InstrumentTracing(c, redisotel.WithTracerProvider(tel.tp)); err != nil {
		t.Fatal(err)
	}
	if err := redisguardotel.InstrumentMetrics(c, redisotel.WithMeterProvider(tel.mp)); err != nil {
		t.Fatal(err)
	}
	return tel, c
}

// exercise sends the service's commands (SET, a BLPOP on a dedicated
// connection) and runs a health check with a write.
func exercise(t *testing.T, c *redisguard.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Set(ctx, "own:{k}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.BLPop(ctx, 10*time.Millisecond, "own:{q}").Err(); err != redis.Nil {
		t.Fatalf("BLPOP: %v, want redis.Nil", err)
	}
	if rep := c.Check(ctx, redisguard.CheckOptions{WriteKey: "redisguard:health:otel"}); !rep.Healthy {
		t.Fatalf("check failed: %v", rep)
	}
}

// checkOwnSpans requires the service's SET and BLPOP spans and none of the
// health check's: no span named after its commands (names), none whose
// statement names its key.
func checkOwnSpans(t *testing.T, tel *telemetry, names ...string) {
	t.Helper()
	got := tel.spanNames()
	for _, want := range []string{"set", "blpop"} {
		if got[want] < 1 {
			t.Errorf("no span named %q; spans: %v", want, got)
		}
	}
	for _, s := range tel.spans.Ended() {
		for _, a := range s.Attributes() {
			if a.Key == "db.statement" && strings.Contains(a.Value.Emit(), "redisguard:health") {
				t.Errorf("span %q of the health check: %s", s.Name(), a.Value.Emit())
			}
		}
	}
	if got["ping"] != 0 {
		t.Errorf("%d spans named ping, want none (the service sent none)", got["ping"])
	}
	for _, n := range names {
		if n != "set" && got[n] != 0 {
			t.Errorf("%d spans named %q, want none", got[n], n)
		}
	}
}

// poolPoint is the key of redisotel's db.client.connections.max point for
// the pool called name, of a client of the given redisguard role.
func poolPoint(name, role string) string {
	return key("db.client.connections.max", attribute.NewSet(
		attribute.String("db.system", "redis"),
		attribute.String("pool.name", name),
		attribute.String("redisguard.client", role),
	))
}
