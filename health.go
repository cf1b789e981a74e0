package redisguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CheckOptions says what Check exercises. The zero value sends only a PING.
type CheckOptions struct {
	// WriteKey, when set, makes the check write it:
	// SET WriteKey <token> PX HealthWriteTTL, where the token says when
	// redisguard wrote it. Choose a key that nobody would take for data and
	// that no other service writes, e.g. "redisguard:health:<service>"; it
	// expires on its own after HealthWriteTTL. In Cluster mode every master
	// is written: WriteKey on its own master, and on each other one a key
	// derived from it that hashes into that master's slots, WriteKey{n}
	// (or, for a WriteKey with a hash tag {tag}, the tag extended: {tag:n}).
	// An ACL user limited to key patterns needs one matching WriteKey*.
	// default: "" (no write)
	WriteKey string

	// RequireAllShards fails the check in Cluster mode when any master of
	// the slot map does not serve (or has an open breaker). By default that
	// only marks the report Degraded, and the check fails when no master
	// serves: every pod of a service checks the same masters, so failing
	// readiness because one master of several is down would take every pod
	// out of rotation at once and turn a partial outage into a total one.
	// Set it for a service that needs every shard to do anything.
	// default: false
	RequireAllShards bool
}

// Report is the outcome of Check: the verdict, each step with its latency
// and error, and every node's breaker. It marshals to JSON for readiness
// handlers and logs, and never contains a password.
type Report struct {
	// Healthy is true when every step that applies succeeded. In Cluster
	// mode it is true when some master serves (see Masters), and with
	// CheckOptions.RequireAllShards when every master serves and the
	// Breakers step succeeded.
	Healthy bool `json:"healthy"`
	// Degraded is true when the check passed but a master does not serve
	// (MastersDown) or has an open breaker (Breakers failed), or a node is
	// marked slow (Slow).
	Degraded bool   `json:"degraded,omitempty"`
	Mode     string `json:"mode"` // "standalone", "sentinel" or "cluster"

	// CheckedAt is when the check started, read from the client's clock.
	CheckedAt time.Time `json:"checked_at"`
	// Duration is how long the whole check took.
	Duration time.Duration `json:"duration_ns"`

	// The steps, in the order they run. Ping is always present;
	// ClusterState (CLUSTER INFO reports cluster_state:ok) and Breakers (no
	// master's breaker is open) in Cluster mode; Write when
	// CheckOptions.WriteKey was set. In Cluster mode Ping, ClusterState and
	// Write are those of the write key's master (without a write key, of a
	// random master's), and Masters has every master's.
	Ping         *StepResult `json:"ping"`
	ClusterState *StepResult `json:"cluster_state,omitempty"`
	Write        *StepResult `json:"write,omitempty"`
	Breakers     *StepResult `json:"breakers,omitempty"`

	// Masters is each master's round trip in Cluster mode, sorted by
	// address: OK when it answered PING, reported cluster_state:ok and,
	// with a write key, took the write of Key; otherwise Error names the
	// first failure. MastersDown lists, sorted, the masters that failed.
	Masters     []*StepResult `json:"masters,omitempty"`
	MastersDown []string      `json:"masters_down,omitempty"`

	// Nodes is the breaker of every node the client has talked to, sorted by
	// address, as in Stats.
	Nodes []NodeStats `json:"nodes"`
	// ReadFromReplica lists the masters, sorted, whose breaker is open and
	// whose reads a replica serves now (ReadFromMasterPreferred).
	ReadFromReplica []string `json:"read_from_replica,omitempty"`
	// Slow lists the nodes marked slow (see Config.SlowNodeFactor); a
	// healthy check with a slow node is Degraded.
	Slow []string `json:"slow,omitempty"`
}

// StepResult is one step of a check.
type StepResult struct {
	OK bool `json:"ok"`
	// Skipped means the step was not attempted because an earlier one failed.
	Skipped bool `json:"skipped,omitempty"`
	// Node is where the step was sent: an address, or for Sentinel the
	// master's breaker name ("sentinel-master:<name>").
	Node string `json:"node,omitempty"`
	// Key is the key a Cluster check wrote on this master (Report.Masters).
	Key     string        `json:"key,omitempty"`
	Latency time.Duration `json:"latency_ns"`
	// Error is the failure, with any configured password removed.
	Error string `json:"error,omitempty"`
}

// Healthy reports whether the client can do its work now. With an empty
// writeKey it sends one PING; otherwise a PING and then
// SET writeKey <token> PX HealthWriteTTL. In Cluster mode it does so on
// every master and is true while any master serves, as ReadinessHandler
// answers 200 (see Check and CheckOptions.RequireAllShards). Pass a key
// that nobody would take for data, such as "redisguard:health:<service>".
//
// Any error gives false (in Cluster mode, one on every master): a
// connection error or timeout, an OOM or READONLY reply, an open breaker, a
// closed client, a cancelled context. Healthy never panics, never retries,
// and is bounded by ctx and the client's timeouts.
func (c *Client) Healthy(ctx context.Context, writeKey string) bool {
	return c.Check(ctx, CheckOptions{WriteKey: writeKey}).Healthy
}

// Check is the detailed form of Healthy: it runs the same steps and reports
// each one. A readiness check has to exercise the operation the service
// depends on: a full server (maxmemory with noeviction) and a read-only
// replica both answer PING while rejecting every write, so with a write key
// the check also writes. What each mode checks:
//
//   - Standalone: PING the server; with a write key, SET it there.
//   - Sentinel: PING the current master, as resolved through the sentinels;
//     with a write key, SET it there.
//   - Cluster: send every master of the last slot map, all at once, one
//     pipeline: PING, CLUSTER INFO (cluster_state:ok required) and, with a
//     write key, a SET of a key in its slots (see CheckOptions.WriteKey).
//     The check is healthy while any master serves, and Degraded, naming
//     the others in MastersDown, unless all do; with RequireAllShards it
//     fails unless all do. A MOVED reply (a stale slot map) fails that
//     master and refreshes the map for the next check.
//
// Each network step is one round trip and is never retried (see oneShot).
// In Standalone and Sentinel mode a failed step skips the rest, and in
// Cluster mode each master is one round trip, so a sick server costs a
// check at most one timeout. Check returns at once on a closed client or a
// done ctx, and otherwise is bounded by ctx and the client's dial, read and
// write timeouts.
//
// A ModeAuto Client still waiting for its server's first answer checks as
// Standalone; when that check's own connection hears that the server is a
// cluster node, Check runs again as a Cluster check on the Client it
// became.
func (c *Client) Check(ctx context.Context, opts CheckOptions) Report {
	if up := c.current(); up != c {
		return up.Check(ctx, opts)
	}
	rep := c.check(ctx, opts)
	if up := c.current(); up != c {
		return up.Check(ctx, opts)
	}
	return rep
}

// check is Check on c itself.
func (c *Client) check(ctx context.Context, opts CheckOptions) (rep Report) {
	start := time.Now()
	rep = Report{Mode: c.cfg.Mode.String(), CheckedAt: c.clock.Now()}
	defer func() {
		// A readiness endpoint and an exec probe must answer; a panic in
		// go-redis or in someone's hook is reported as a failed check rather
		// than taking the caller down with it.
		if p := recover(); p != nil {
			rep.Ping = &StepResult{Error: c.redact(fmt.Sprintf("panic during health check: %v", p))}
		}
		rep.Nodes = c.Stats().Nodes
		for _, n := range rep.Nodes {
			if n.Slow {
				rep.Slow = append(rep.Slow, n.Addr)
			}
		}
		if c.replicas != nil {
			rep.ReadFromReplica = c.replicas.readFromReplica()
		}
		rep.judge(opts.RequireAllShards)
		rep.Duration = time.Since(start)
	}()

	var err error
	switch {
	case ctx == nil:
		err = errors.New("redisguard: nil context")
	case c.closed.Load():
		err = ErrClosed
	default:
		err = ctx.Err()
	}
	if err != nil {
		rep.Ping = &StepResult{Error: c.redact(err.Error())}
		rep.skipRest(opts, c.cfg.Mode)
		return rep
	}

	if c.cfg.Mode == ModeCluster {
		c.checkCluster(ctx, opts, &rep)
		return rep
	}
	node := c.cfg.Addrs[0]
	if c.cfg.Mode == ModeSentinel {
		node = c.sentinel.node().addr
	}
	// The facade: closed-client refusal, error translation and the node's
	// breaker all apply, as for any command.
	send := c.UniversalClient.Process
	rep.Ping = c.step(ctx, node, send, "ping")
	if opts.WriteKey != "" {
		if rep.Ping.OK {
			rep.Write = c.step(ctx, node, send, c.writeArgs(opts.WriteKey)...)
		} else {
			rep.Write = &StepResult{Skipped: true}
		}
	}
	return rep
}

// step sends one command, marked not to be retried, and times it.
func (c *Client) step(ctx context.Context, node string, send func(context.Context, redis.Cmder) error, args ...any) *StepResult {
	res, _ := c.roundTrip(ctx, node, send, args...)
	return res
}

// roundTrip is step that also returns the reply, for steps that inspect it.
func (c *Client) roundTrip(ctx context.Context, node string, send func(context.Context, redis.Cmder) error, args ...any) (*StepResult, any) {
	cmd := redis.NewCmd(ctx, args...)
	start := time.Now()
	err := send(ctx, oneShot{cmd})
	res := &StepResult{Node: node, Latency: time.Since(start)}
	if err != nil {
		if isRedirect(err) && c.topo != nil {
			// Our slot map is stale: the next check should find the owner.
			c.topo.trigger()
		}
		res.Error = c.redact(c.fac.translate(ctx, err).Error())
		return res, nil
	}
	res.OK = true
	return res, cmd.Val()
}

// writeArgs is the probe write. PX rather than go-redis's Set, which would
// pick EX for whole seconds: the TTL is the configured one, in milliseconds,
// and never rounds down to zero (an invalid expiry).
func (c *Client) writeArgs(key string) []any {
	ttl := max(c.cfg.HealthWriteTTL.Milliseconds(), 1)
	token := "redisguard health check " + c.clock.Now().UTC().Format(time.RFC3339Nano)
	return []any{"set", key, token, "px", ttl}
}

// oneShot marks a health check's command as one of redisguard's own
// (IsOwnCommand) and as not retryable, through go-redis's own
// per-command switch: Cmder.NoRetry, which every go-redis retry loop and
// nodeGuard's reset retry consult. A check judges a server that answers by
// its first answer: a reset probe connection is a failed step, not a
// second SET. Cluster checks also bypass the cluster client's own loop (see
// checkCluster). go-redis still replays a command that provably never
// reached the wire (a "forced" retry), which is a first attempt, not a
// second one.
type oneShot struct{ *redis.Cmd }

func (oneShot) NoRetry() bool { return true }

// judge sets Healthy and Degraded from the steps.
func (r *Report) judge(allShards bool) {
	r.Healthy = r.verdict(allShards)
	r.Degraded = r.Healthy && (len(r.Slow) > 0 || len(r.MastersDown) > 0 || r.Breakers != nil && !r.Breakers.OK && !r.Breakers.Skipped)
}

// verdict is true when every step that applies succeeded; the breakers step
// applies when every shard is required. A Cluster check that reached the
// masters is judged by them (clusterVerdict).
func (r *Report) verdict(allShards bool) bool {
	if r.Masters != nil {
		return r.clusterVerdict(allShards)
	}
	steps := []*StepResult{r.Ping, r.ClusterState, r.Write}
	if allShards {
		steps = append(steps, r.Breakers)
	}
	for _, s := range steps {
		if s != nil && !s.OK {
			return false
		}
	}
	return r.Ping != nil
}

// skipRest marks the steps after a failed start as skipped.
func (r *Report) skipRest(opts CheckOptions, mode Mode) {
	if opts.WriteKey != "" {
		r.Write = &StepResult{Skipped: true}
	}
	if mode == ModeCluster {
		r.ClusterState = &StepResult{Skipped: true}
		r.Breakers = &StepResult{Skipped: true}
	}
}

// String is a one-line summary for terminals and logs, e.g.
//
//	healthy (standalone, 10.0.0.5:6379): ping 312µs, write 405µs
//
// A Cluster check that reached the masters is summed up by them: how many
// serve, what each was asked, and each one that does not, with why:
//
//	degraded (cluster): 2 of 3 masters serve (ping, cluster_state, write; slowest 405µs); down 10.0.0.6:6379: ping: redisguard: node unavailable (node 10.0.0.6:6379); breaker open for master 10.0.0.6:6379
//	unhealthy (standalone, 10.0.0.5:6379): ping 298µs, write failed: OOM command not allowed ...
func (r Report) String() string {
	steps := []struct {
		name string
		s    *StepResult
	}{{"ping", r.Ping}, {"cluster_state", r.ClusterState}, {"write", r.Write}, {"breakers", r.Breakers}}
	var b strings.Builder
	switch {
	case r.Degraded:
		b.WriteString("degraded (")
	case r.Healthy:
		b.WriteString("healthy (")
	default:
		b.WriteString("unhealthy (")
	}
	if r.Masters != nil {
		r.clusterString(&b)
		return b.String()
	}
	b.WriteString(r.Mode)
	for _, st := range steps {
		if st.s != nil && st.s.Node != "" {
			b.WriteString(", ")
			b.WriteString(st.s.Node)
			break
		}
	}
	b.WriteString("): ")
	first := true
	for _, st := range steps {
		s := st.s
		if s == nil || s.Skipped {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		switch {
		case !s.OK:
			b.WriteString(st.name + " failed: " + s.Error)
		case st.name == "breakers":
			b.WriteString("no master breaker open")
		default:
			b.WriteString(st.name + " " + s.Latency.Round(time.Microsecond).String())
		}
	}
	if first {
		b.WriteString("nothing checked")
	}
	r.writeSlow(&b)
	return b.String()
}

func (r Report) writeSlow(b *strings.Builder) {
	if len(r.Slow) > 0 {
		b.WriteString("; slow: " + strings.Join(r.Slow, " "))
	}
}

// infoField returns the value of field in INFO-style "field:value" text.
func infoField(text, field string) string {
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return v
		}
	}
	return ""
}

// Compile-time check: the probe wrapper is still a command go-redis accepts.
var _ redis.Cmder = oneShot{}
