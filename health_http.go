package redisguard

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/redisguard/redisguard/internal/clock"
)

// Defaults for ReadinessOptions fields left at zero.
const (
	// DefaultReadinessCacheFor is how long a readiness result is reused.
	DefaultReadinessCacheFor = time.Second
	// DefaultReadinessTimeout bounds one readiness probe. It is a little
	// under the 1s default timeoutSeconds of a Kubernetes probe, so that a
	// hung Redis yields our 503 and report rather than a kubelet timeout.
	DefaultReadinessTimeout = 800 * time.Millisecond
)

// ReadinessOptions configures ReadinessHandler. The zero value pings only,
// caches for DefaultReadinessCacheFor and bounds a probe by
// DefaultReadinessTimeout.
type ReadinessOptions struct {
	// WriteKey is written by every probe; see CheckOptions.WriteKey. Set it:
	// without it a full or read-only server looks ready.
	// default: "" (PING only)
	WriteKey string

	// CacheFor is how long a result is served to later requests without
	// asking Redis again. Many pods, kubelets and load balancers poll
	// readiness; the endpoint must not multiply the load on the Redis it
	// protects. Zero or negative selects the default.
	// default: DefaultReadinessCacheFor (1s)
	CacheFor time.Duration

	// Timeout bounds one probe. The probe does not run on the request's
	// context, whose cancellation would fail every request sharing it, so
	// this is its only bound besides the client's own timeouts. Zero or
	// negative selects the default.
	// default: DefaultReadinessTimeout (800ms)
	Timeout time.Duration

	// RequireAllShards makes a Cluster-mode probe answer 503 when any master
	// does not serve; by default it answers 200 with "degraded": true and
	// the masters in "masters_down", and 503 only when no master serves.
	// See CheckOptions.RequireAllShards.
	// default: false
	RequireAllShards bool
}

// ReadinessHandler returns an http.Handler for a readiness endpoint. It
// answers 200 when Check passes and 503 when it does not, with the Report as
// a JSON body either way. In Cluster mode Check passes while any master
// takes the write (see Check).
//
// Results are cached for opts.CacheFor, timed by the client's clock, and
// concurrent requests that find no fresh result share one probe, so a
// hundred requests at once cost Redis one check. The shared probe keeps the
// first request's context values but not its cancellation: a requester that
// hangs up must not fail the probe for everyone waiting on it. opts.Timeout
// bounds it instead.
//
// Readiness is where Redis belongs; see LivenessHandler for where it does not.
func (c *Client) ReadinessHandler(opts ReadinessOptions) http.Handler {
	if opts.CacheFor <= 0 {
		opts.CacheFor = DefaultReadinessCacheFor
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultReadinessTimeout
	}
	return &readiness{check: c.Check, clock: c.clock, opts: opts}
}

// readiness is the handler behind ReadinessHandler. It starts no goroutine:
// the probe runs on the goroutine of the request that found the cache stale,
// and singleflight parks the others until it returns.
type readiness struct {
	check func(context.Context, CheckOptions) Report // the client's Check
	clock clock.Clock
	opts  ReadinessOptions
	sf    singleflight.Group

	mu      sync.Mutex
	last    *Report   // guarded by mu; nil until the first probe finishes
	expires time.Time // guarded by mu; when last stops being served
}

func (h *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep := h.report(r.Context())
	body, err := json.Marshal(rep)
	if err != nil {
		// A Report holds only strings, bools, numbers and times; this cannot
		// happen, and if it did the status code still tells the truth.
		body = []byte(`{"healthy":false}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if rep.Healthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(append(body, '\n'))
}

// report returns a fresh cached result or runs one shared probe.
func (h *readiness) report(ctx context.Context) Report {
	if rep, ok := h.cached(); ok {
		return rep
	}
	v, _, _ := h.sf.Do("probe", func() (any, error) {
		// A probe may have finished between our cache look and Do; without
		// this second look, a request that just missed its result would
		// start another.
		if rep, ok := h.cached(); ok {
			return rep, nil
		}
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.opts.Timeout)
		defer cancel()
		rep := h.check(pctx, CheckOptions{WriteKey: h.opts.WriteKey, RequireAllShards: h.opts.RequireAllShards})
		h.mu.Lock()
		h.last = &rep
		h.expires = h.clock.Now().Add(h.opts.CacheFor)
		h.mu.Unlock()
		return rep, nil
	})
	return v.(Report)
}

func (h *readiness) cached() (Report, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil || !h.clock.Now().Before(h.expires) {
		return Report{}, false
	}
	return *h.last, true
}

// LivenessHandler returns an http.Handler that answers 200 for as long as
// the process can serve HTTP. It never touches Redis, and that is the point.
//
// Liveness answers "is this process broken beyond repair, so that
// restarting it would help?". A Redis outage is not that: restarting the pod
// does not fix Redis. It throws away warm connections and caches, and when
// Redis hiccups every pod fails liveness at once, so the whole fleet
// restarts together, and the restarted pods reconnect together and hammer
// the Redis that is trying to recover: a restart storm turning one sick
// dependency into a cascading outage. Dependencies belong in readiness
// (ReadinessHandler), which takes the pod out of rotation and puts it back
// when Redis recovers, without a restart.
func (c *Client) LivenessHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
}
