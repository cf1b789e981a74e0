// Command prometheus serves a redisguard client's metrics for Prometheus:
// extra/redisguardprom's Collector (breaker states, probes, exhausted
// budgets, events, ...) beside the Go runtime's.
//
//	go run . -addr localhost:6379 -listen :9121
//	curl localhost:9121/metrics
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardprom"
)

func main() {
	addrs := flag.String("addr", "localhost:6379", "comma-separated Redis addresses (several: Cluster)")
	listen := flag.String("listen", ":9121", "where to serve /metrics")
	flag.Parse()

	c, reg, err := setup(redisguard.Config{
		Addrs:    strings.Split(*addrs, ","),
		Password: os.Getenv("REDIS_PASSWORD"),
		Logger:   slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	srv := &http.Server{Addr: *listen, Handler: handler(reg), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("serving metrics on %s/metrics", *listen)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// setup builds the client through redisguardprom, and a registry holding its
// Collector and the Go runtime's, as a service would.
func setup(cfg redisguard.Config) (*redisguard.Client, *prometheus.Registry, error) {
	c, metrics, err := redisguardprom.NewClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics, collectors.NewGoCollector())
	return c, reg, nil
}

func handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
