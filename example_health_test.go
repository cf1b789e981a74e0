package redisguard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redisguard/redisguard"
)

// Healthy with a write key proves the server takes writes, which a PING does
// not: a full or read-only server answers PING too.
func ExampleClient_Healthy() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("healthy:", c.Healthy(ctx, "redisguard:health:example"))
	// The probe key expires on its own (Config.HealthWriteTTL, default 5s).
	fmt.Println("key expires in:", srv.TTL("redisguard:health:example"))

	srv.SetError("READONLY You can't write against a read only replica.")
	fmt.Println("healthy when every command fails:", c.Healthy(ctx, "redisguard:health:example"))
	// Output:
	// healthy: true
	// key expires in: 5s
	// healthy when every command fails: false
}

// Check says which step failed and why; the report marshals to JSON.
func ExampleClient_Check() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A server still loading its dataset refuses even PING.
	srv.SetError("LOADING Redis is loading the dataset in memory")
	rep := c.Check(ctx, redisguard.CheckOptions{WriteKey: "redisguard:health:example"})
	fmt.Println("healthy:", rep.Healthy)
	fmt.Println("ping error:", rep.Ping.Error)
	fmt.Println("write skipped:", rep.Write.Skipped)
	// Output:
	// healthy: false
	// ping error: LOADING Redis is loading the dataset in memory
	// write skipped: true
}

// A readiness endpoint that writes, and a liveness endpoint that never
// touches Redis.
func ExampleClient_ReadinessHandler() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()

	c, err := redisguard.NewClient(redisguard.Config{Addrs: []string{srv.Addr()}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	mux := http.NewServeMux()
	mux.Handle("/readyz", c.ReadinessHandler(redisguard.ReadinessOptions{
		WriteKey: "redisguard:health:my-service",
	}))
	mux.Handle("/livez", c.LivenessHandler())

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var rep redisguard.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		panic(err)
	}
	fmt.Println("/readyz:", rec.Code, "healthy:", rep.Healthy, "wrote:", rep.Write.OK)

	srv.Close() // Redis goes away; the process is still fine
	rec = httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
	fmt.Println("/livez:", rec.Code)
	// Output:
	// /readyz: 200 healthy: true wrote: true
	// /livez: 200
}
