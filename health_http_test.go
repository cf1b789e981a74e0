package redisguard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

var healthEpoch = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

// newFakeClockClient is newTestClient with a fake clock, so cache expiry is
// moved by the test instead of waited for.
func newFakeClockClient(t *testing.T, cfg Config) (*Client, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(healthEpoch)
	c, err := newClient(cfg, clk)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, clk
}

// pingGate is a hook that counts the PINGs the client sends and holds each
// one until the test opens the gate, so a probe can be kept in flight.
type pingGate struct {
	pings   atomic.Int32
	entered chan struct{} // one value per PING that reached the gate
	open    chan struct{} // closed to let PINGs through
}

func newPingGate() *pingGate {
	return &pingGate{entered: make(chan struct{}, 1000), open: make(chan struct{})}
}

func (g *pingGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *pingGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "ping" {
			g.pings.Add(1)
			g.entered <- struct{}{}
			<-g.open
		}
		return next(ctx, cmd)
	}
}

func (g *pingGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// get serves one request and decodes the report. It only asserts, so that
// it may run on goroutines other than the test's.
func get(t *testing.T, h http.Handler, r *http.Request) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	var rep Report
	assert.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep), "body %q", rec.Body.String())
	return rec.Code, rep
}

func readyz() *http.Request { return httptest.NewRequest(http.MethodGet, "/readyz", nil) }

// Acceptance 4: 200 or 503, with the JSON report either way.
func TestReadinessHandlerStatus(t *testing.T) {
	primary := redistest.StartServer(t)
	full := redistest.StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	fillUntilOOM(t, full)
	gone := redistest.StartServer(t)
	gone.Kill(t)

	tests := []struct {
		name     string
		addr     string
		writeKey string
		want     int
		wantErr  string
	}{
		{name: "healthy primary", addr: primary.Addr, writeKey: healthKey, want: http.StatusOK},
		{name: "full server, ping only", addr: full.Addr, want: http.StatusOK},
		{name: "full server with a write key", addr: full.Addr, writeKey: healthKey, want: http.StatusServiceUnavailable, wantErr: "OOM"},
		{name: "server gone", addr: gone.Addr, writeKey: healthKey, want: http.StatusServiceUnavailable, wantErr: "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newFakeClockClient(t, healthConfig(tt.addr))
			rec := httptest.NewRecorder()
			c.ReadinessHandler(ReadinessOptions{WriteKey: tt.writeKey, Timeout: 5 * time.Second}).ServeHTTP(rec, readyz())
			assert.Equal(t, tt.want, rec.Code)
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			var rep Report
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rep), "body %q", rec.Body.String())
			assert.Equal(t, tt.want == http.StatusOK, rep.Healthy)
			if tt.wantErr != "" {
				assert.Contains(t, rec.Body.String(), tt.wantErr)
			}
		})
	}
}

// A hundred requests arriving while a probe is in flight share it: the
// server sees one PING.
func TestReadinessHandlerSharesOneProbe(t *testing.T) {
	srv := redistest.StartServer(t)
	c, _ := newFakeClockClient(t, healthConfig(srv.Addr))
	gate := newPingGate()
	c.AddHook(gate)
	h := c.ReadinessHandler(ReadinessOptions{Timeout: 10 * time.Second})
	resetStats(t, srv)

	const requests = 100
	var (
		wg      sync.WaitGroup
		started atomic.Int32
		codes   [requests]int
	)
	for i := range requests {
		wg.Go(func() {
			started.Add(1)
			codes[i], _ = get(t, h, readyz())
		})
	}
	<-gate.entered // the first probe is in flight and held
	require.Eventually(t, func() bool { return started.Load() == requests }, 10*time.Second, time.Millisecond)
	close(gate.open)
	wg.Wait()

	for i, code := range codes {
		assert.Equal(t, http.StatusOK, code, "request %d", i)
	}
	assert.Equal(t, int32(1), gate.pings.Load(), "probes started")
	assert.Equal(t, 1, commandStat(t, srv, "ping"), "PINGs the server saw")
}

// Results are reused for CacheFor on the client's clock, then refreshed.
func TestReadinessHandlerCache(t *testing.T) {
	srv := redistest.StartServer(t)
	tests := []struct {
		name     string
		cacheFor time.Duration
		want     time.Duration
	}{
		{name: "default", want: DefaultReadinessCacheFor},
		{name: "negative means default", cacheFor: -time.Second, want: DefaultReadinessCacheFor},
		{name: "configured", cacheFor: 5 * time.Second, want: 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, clk := newFakeClockClient(t, healthConfig(srv.Addr))
			gate := newPingGate()
			close(gate.open)
			c.AddHook(gate)
			h := c.ReadinessHandler(ReadinessOptions{CacheFor: tt.cacheFor})

			code, first := get(t, h, readyz())
			require.Equal(t, http.StatusOK, code)
			assert.Equal(t, int32(1), gate.pings.Load())

			clk.Advance(tt.want - time.Nanosecond)
			code, again := get(t, h, readyz())
			require.Equal(t, http.StatusOK, code)
			assert.Equal(t, int32(1), gate.pings.Load(), "still fresh: no probe")
			assert.Equal(t, first.CheckedAt, again.CheckedAt, "the cached report is served")

			clk.Advance(time.Nanosecond)
			_, _ = get(t, h, readyz())
			assert.Equal(t, int32(2), gate.pings.Load(), "expired: one new probe")
		})
	}
}

// The shared probe must not die with the request that started it.
func TestReadinessProbeSurvivesHangup(t *testing.T) {
	srv := redistest.StartServer(t)
	c, _ := newFakeClockClient(t, healthConfig(srv.Addr))
	gate := newPingGate()
	c.AddHook(gate)
	h := c.ReadinessHandler(ReadinessOptions{Timeout: 10 * time.Second})

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	firstCode := make(chan int, 1)
	go func() {
		code, _ := get(t, h, readyz().WithContext(ctx))
		firstCode <- code
	}()
	<-gate.entered
	hangUp()
	close(gate.open)

	assert.Equal(t, http.StatusOK, <-firstCode, "the probe ran to completion")
	code, rep := get(t, h, readyz())
	assert.Equal(t, http.StatusOK, code, "the cached result is the probe's, not a cancellation: %v", rep)
	assert.Equal(t, int32(1), gate.pings.Load())
}

// A hung Redis costs a readiness request opts.Timeout, not the client's read
// timeout.
func TestReadinessProbeTimeout(t *testing.T) {
	srv := redistest.StartServer(t)
	c, _ := newFakeClockClient(t, Config{Addrs: []string{srv.Addr}, ReadTimeout: 30 * time.Second})
	require.NoError(t, c.Ping(testCtx(t, 5*time.Second)).Err())
	srv.Pause(t)
	h := c.ReadinessHandler(ReadinessOptions{Timeout: 300 * time.Millisecond})

	start := time.Now()
	code, rep := get(t, h, readyz())
	took := time.Since(start)
	t.Logf("readiness against a paused server: %d in %v", code, took)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, rep.Ping.Error, "deadline exceeded")
	assert.Less(t, took, hungBound)
}

// Liveness never depends on Redis: it stays 200 with the server gone and the
// client closed, and sends nothing.
func TestLivenessHandlerIgnoresRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	c, clk := newFakeClockClient(t, healthConfig(srv.Addr))
	gate := newPingGate()
	close(gate.open)
	c.AddHook(gate)
	ready := c.ReadinessHandler(ReadinessOptions{})
	live := c.LivenessHandler()

	code, _ := get(t, ready, readyz())
	require.Equal(t, http.StatusOK, code)
	srv.Kill(t)
	clk.Advance(DefaultReadinessCacheFor)
	code, _ = get(t, ready, readyz())
	require.Equal(t, http.StatusServiceUnavailable, code, "readiness sees Redis gone")
	pings := gate.pings.Load()

	for _, closed := range []bool{false, true} {
		if closed {
			require.NoError(t, c.Close())
		}
		rec := httptest.NewRecorder()
		live.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/livez", nil))
		assert.Equal(t, http.StatusOK, rec.Code, "closed client: %v", closed)
		assert.Equal(t, "ok\n", rec.Body.String())
	}
	assert.Equal(t, pings, gate.pings.Load(), "liveness sent a command")
}

// Every pod of a service checks the same masters with the same write key.
// One master of three hung: readiness stays 200, marked degraded and naming
// that master, whichever master the write key lives on, both while the
// hung master's round trip times out and once its breaker is open; it is
// 503 for a pod that requires every shard, and for every pod once all three
// masters hang. Failing every pod on a partial outage would make it a total
// one. The cluster serves the slots it can (cluster-require-full-coverage
// no), so the other masters keep taking writes however long the pause.
func TestReadinessInAPartialOutage(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3, Args: []string{"--cluster-require-full-coverage", "no"}})
	c := newTestClient(t, Config{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond})
	sick, well := cl.Masters[2], cl.Masters[0]
	// A handler per case, each probe fresh: CacheFor is all but zero.
	handler := func(opts ReadinessOptions) http.Handler {
		opts.CacheFor = time.Nanosecond
		return c.ReadinessHandler(opts)
	}
	onSick := handler(ReadinessOptions{WriteKey: cl.KeyOn(t, sick, "ready:")})
	onWell := handler(ReadinessOptions{WriteKey: cl.KeyOn(t, well, "ready:")})
	allShards := handler(ReadinessOptions{WriteKey: cl.KeyOn(t, well, "ready:"), RequireAllShards: true})
	// A second pod, polled only once every master hangs, with every breaker
	// closed then: each master's round trip waits out the read timeout.
	other := newTestClient(t, Config{Addrs: cl.Addrs(), ReadTimeout: time.Second})
	otherPod := other.ReadinessHandler(ReadinessOptions{WriteKey: cl.KeyOn(t, well, "ready:"), CacheFor: time.Nanosecond, Timeout: 5 * time.Second})
	for _, h := range []http.Handler{onSick, onWell, allShards, otherPod} {
		status, rep := get(t, h, readyz())
		require.Equal(t, http.StatusOK, status, "%v", rep)
		require.False(t, rep.Degraded, "%v", rep)
	}

	sick.Pause(t)
	cases := []struct {
		name     string
		h        http.Handler
		status   int
		degraded bool
	}{
		{"write key on the hung master", onSick, http.StatusOK, true},
		{"write key on a healthy master", onWell, http.StatusOK, true},
		{"every shard required", allShards, http.StatusServiceUnavailable, false},
	}
	// Polls until well after the hung master's breaker opened: each poll
	// of each case sends a round trip that times out, or fails at once.
	var polls int
	var slowest time.Duration
	defer func() { t.Logf("%d polls of each case while one master hung, the slowest %v", polls, slowest) }()
	for poll := 0; breakerState(c, sick.Addr) != "open" || poll < 3; poll++ {
		polls++
		require.Less(t, poll, 3*DefaultNodeFailureThreshold, "the hung master's breaker never opened")
		for _, tt := range cases {
			start := time.Now()
			status, rep := get(t, tt.h, readyz())
			took := time.Since(start)
			slowest = max(slowest, took)
			assert.Equal(t, tt.status, status, "%s, poll %d: %v", tt.name, poll, rep)
			assert.Equal(t, tt.degraded, rep.Degraded, "%s, poll %d: %v", tt.name, poll, rep)
			assert.Equal(t, []string{sick.Addr}, rep.MastersDown, "%s, poll %d: the report names the master that is out", tt.name, poll)
			assert.Less(t, took, hungBound, "%s, poll %d", tt.name, poll)
		}
	}

	t.Run("all three masters hung", func(t *testing.T) {
		for _, m := range cl.Masters[:2] {
			m.Pause(t)
		}
		for _, h := range []http.Handler{onSick, onWell} {
			start := time.Now()
			status, rep := get(t, h, readyz())
			assert.Equal(t, http.StatusServiceUnavailable, status, "%v", rep)
			assert.Len(t, rep.MastersDown, 3, "%v", rep)
			assert.Less(t, time.Since(start), hungBound)
		}
		// The masters are asked at once: one read timeout, not three.
		start := time.Now()
		status, rep := get(t, otherPod, readyz())
		took := time.Since(start)
		t.Logf("three hung masters, no breaker open, 1s read timeout: 503 after %v", took)
		assert.Equal(t, http.StatusServiceUnavailable, status, "%v", rep)
		assert.Len(t, rep.MastersDown, 3, "%v", rep)
		assert.GreaterOrEqual(t, took, 900*time.Millisecond, "the round trips did not wait for the hung masters")
		assert.Less(t, took, 2*time.Second, "the masters were asked one after the other")
	})
	for _, m := range cl.Masters {
		m.Resume(t)
	}
	cl.WaitHealthy(t)
	redistest.WaitFor(t, 20*time.Second, "readiness once every master serves again", func() error {
		if status, rep := get(t, onSick, readyz()); status != http.StatusOK || rep.Degraded {
			return fmt.Errorf("%d: %v", status, rep)
		}
		return nil
	})
}
