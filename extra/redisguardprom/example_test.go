package redisguardprom_test

import (
	"context"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/extra/redisguardprom"
)

// NewClient replaces redisguard.NewClient; the Collector it returns is
// registered like any other, and served with promhttp.HandlerFor(reg, ...).
func ExampleNewClient() {
	srv, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	client, metrics, err := redisguardprom.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)

	if err := client.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		log.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "redisguard_node_breaker_state" {
			for _, m := range f.GetMetric() {
				fmt.Println(m.GetLabel()[1].GetValue(), m.GetGauge().GetValue()) // labels: node, state
			}
		}
	}
	// Output:
	// closed 1
	// half-open 0
	// open 0
}
