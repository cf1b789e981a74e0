package redisguard

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
)

// checkCluster runs the Cluster steps: one round trip to every master of
// the slot map, all at once, each a pipeline of PING, CLUSTER INFO and,
// with a write key, a SET of a key that master owns (healthTargets). A
// master serves when all of them succeed and CLUSTER INFO says
// cluster_state:ok. The report's Ping, ClusterState and Write are the write
// key's own master's (without a write key, a random master's), Masters is
// every master's round trip, and MastersDown names those that do not serve.
//
// Every pod of a service uses the same write key, so a verdict taken from
// the key's master alone would take every pod out of rotation together
// while that one master is down and the others serve; and a node that has
// just restarted reports cluster_state:fail for its first seconds while the
// rest of the cluster is fine. judge therefore fails the check only when no
// master serves, or, with RequireAllShards, when any does not.
//
// The round trips go to the node clients directly, obtained from go-redis's
// slot map, rather than through the cluster client: go-redis routes PING to
// every shard (its command tips say all_shards) and its loop retries a
// READONLY reply after a backoff sleep even for a command marked NoRetry.
// Node clients carry the node's breaker hook, so an open breaker fails its
// master's round trip at once and every outcome still feeds the breaker.
func (c *Client) checkCluster(ctx context.Context, opts CheckOptions, rep *Report) {
	cc := c.UniversalClient.(*redis.ClusterClient)
	// The check asks each master itself: replica reads (replicaHook) leave
	// calls on a node of the caller's choice alone.
	ctx = context.WithValue(ctx, directNodeKey{}, true)
	// An empty key hashes to a random slot in go-redis, so checks without a
	// write key report a different master's steps each time.
	own, err := cc.MasterForKey(ctx, opts.WriteKey)
	if err != nil {
		rep.Ping = &StepResult{Error: c.redact(c.fac.translate(ctx, err).Error())}
		rep.skipRest(opts, ModeCluster)
		rep.Breakers = c.masterBreakersStep()
		return
	}
	targets := c.healthTargets(ctx, cc, opts.WriteKey, own)
	rounds := make([]masterRound, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { rounds[i] = c.roundTripTo(ctx, t, opts.WriteKey != "") })
	}
	wg.Wait()

	rep.Masters = make([]*StepResult, 0, len(rounds))
	for _, r := range rounds {
		rep.Masters = append(rep.Masters, r.summary)
		if !r.summary.OK {
			rep.MastersDown = append(rep.MastersDown, r.summary.Node)
		}
		if r.own {
			rep.Ping, rep.ClusterState, rep.Write = r.ping, r.state, r.write
		}
	}
	// After the round trips, which may have opened a breaker.
	rep.Breakers = c.masterBreakersStep()
}

// healthTarget is one master a Cluster check sends its round trip to.
type healthTarget struct {
	addr string
	key  string        // the key written there, with a write key
	cl   *redis.Client // go-redis's node client; nil when no key was found
	own  bool          // the write key's own master
}

// maxKeySearch bounds the search for a key of each master's slots. A
// master with s of the 16384 slots takes about 16384/s tries, each a hash
// and a lookup in go-redis's slot map; one that owns a single slot is found
// within the bound but for a chance of e^-16.
const maxKeySearch = 1 << 18

// healthTargets returns the masters of the last slot map, sorted by
// address, each with go-redis's node client and the key to write there:
// the write key itself on own, its master, and on every other master a key
// derived from it (derivedKey) that hashes into that master's slots,
// as go-redis's slot map has them. Without a write key the keys only pick
// the node clients.
func (c *Client) healthTargets(ctx context.Context, cc *redis.ClusterClient, writeKey string, own *redis.Client) []healthTarget {
	ownAddr := own.Options().Addr
	targets := []healthTarget{{addr: ownAddr, key: writeKey, cl: own, own: true}}
	want := make(map[string]int) // master address -> index in targets
	want[ownAddr] = 0
	for _, m := range c.topo.slotMap().Masters() {
		if _, ok := want[m]; !ok {
			want[m] = len(targets)
			targets = append(targets, healthTarget{addr: m})
		}
	}
	missing := len(targets) - 1
	base := writeKey
	if base == "" {
		base = "redisguard:health"
	}
	for n := 0; missing > 0 && n < maxKeySearch; n++ {
		key := derivedKey(base, n)
		cl, err := cc.MasterForKey(ctx, key)
		if err != nil {
			break
		}
		i, ok := want[cl.Options().Addr]
		if !ok || targets[i].cl != nil {
			continue
		}
		targets[i].cl, targets[i].key = cl, key
		missing--
	}
	if writeKey == "" {
		for i := range targets {
			targets[i].key = ""
		}
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].addr < targets[j].addr })
	return targets
}

// derivedKey is the n-th key derived from key for the per-master writes: a
// hash tag appended (key{n}), or, when key has a hash tag of its own, that
// tag extended ({tag:n}), so that each n may hash to another slot. Either
// way key stays a prefix of the derived key, or of its part before the
// tag, which keeps an ACL key pattern such as ~redisguard:health:* valid.
func derivedKey(key string, n int) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			end += open + 1
			return key[:end] + ":" + strconv.Itoa(n) + key[end:]
		}
	}
	return key + "{" + strconv.Itoa(n) + "}"
}

// masterRound is one master's round trip: its steps, as the report's Ping,
// ClusterState and Write take them for the write key's master, and summary,
// the master's entry in Report.Masters.
type masterRound struct {
	own                bool
	ping, state, write *StepResult
	summary            *StepResult
}

// roundTripTo sends t its pipeline: PING, CLUSTER INFO and, with write, the
// SET, marked not to be retried, in one round trip.
func (c *Client) roundTripTo(ctx context.Context, t healthTarget, write bool) (r masterRound) {
	r.own = t.own
	r.summary = &StepResult{Node: t.addr}
	if write {
		r.summary.Key = t.key
	}
	if t.cl == nil {
		r.summary.Error = "no key of its slots found in go-redis's slot map"
		r.ping = &StepResult{Node: t.addr, Error: r.summary.Error}
		r.state = &StepResult{Skipped: true}
		if write {
			r.write = &StepResult{Skipped: true}
		}
		return r
	}
	defer func() {
		// As in Check: a panic in go-redis or in a hook is a failed
		// master, not a crashed process.
		if p := recover(); p != nil {
			r.summary.OK = false
			r.summary.Error = c.redact(fmt.Sprintf("panic during health check: %v", p))
			r.ping = &StepResult{Node: t.addr, Error: r.summary.Error}
			r.state, r.write = &StepResult{Skipped: true}, nil
			if write {
				r.write = &StepResult{Skipped: true}
			}
		}
	}()
	cmds := []*redis.Cmd{redis.NewCmd(ctx, "ping"), redis.NewCmd(ctx, "cluster", "info")}
	if write {
		cmds = append(cmds, redis.NewCmd(ctx, c.writeArgs(t.key)...))
	}
	start := time.Now()
	_, _ = t.cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, oneShot{cmd})
		}
		return nil
	})
	latency := time.Since(start)
	r.summary.Latency = latency

	steps := make([]*StepResult, len(cmds))
	var shared bool // a failure that is no reply: the connection's, every command's
	for i, cmd := range cmds {
		if shared {
			steps[i] = &StepResult{Skipped: true}
			continue
		}
		s := &StepResult{Node: t.addr, Latency: latency, OK: true}
		if err := cmd.Err(); err != nil {
			if isRedirect(err) {
				// Our slot map is stale: the next check should find the owner.
				c.topo.trigger()
			}
			s.OK, s.Error = false, c.redact(c.fac.translate(ctx, err).Error())
			shared = !isRedisReply(err)
		} else if i == 1 {
			s.OK, s.Error = clusterStateOK(cmd.Val())
		}
		steps[i] = s
	}
	r.ping, r.state = steps[0], steps[1]
	if write {
		r.write = steps[2]
	}
	r.summary.OK = true
	for i, s := range steps {
		if !s.OK && !s.Skipped {
			r.summary.OK = false
			r.summary.Error = s.Error
			if !strings.HasPrefix(s.Error, "cluster_state:") {
				r.summary.Error = stepNames[i] + ": " + s.Error
			}
			break
		}
	}
	return r
}

// stepNames name the commands of a master's round trip, in order, as
// Report.String does.
var stepNames = []string{"ping", "cluster info", "write"}

// clusterStateOK reads a CLUSTER INFO reply and requires cluster_state:ok;
// otherwise it returns the state as the error, e.g. "cluster_state:fail".
func clusterStateOK(reply any) (bool, string) {
	text, _ := reply.(string)
	state := infoField(text, "cluster_state")
	if state == "ok" {
		return true, ""
	}
	if state == "" {
		state = "missing"
	}
	return false, "cluster_state:" + state
}

// masterBreakersStep fails if a master in the last slot map has an open
// breaker. Only Open counts: a half-open breaker lets a probe through, and
// if readiness failed on it, a pod taken out of rotation would send no
// request to that node, its breaker would never close, and the pod would
// never become ready again.
func (c *Client) masterBreakersStep() *StepResult {
	view := c.topo.slotMap()
	if view == nil {
		// No slot map yet: the ping step has already failed with the reason.
		return &StepResult{Skipped: true}
	}
	var open []string
	for _, n := range c.nodes.all() {
		if view.IsMaster(n.addr) && n.br.State() == breaker.Open {
			open = append(open, n.addr)
		}
	}
	if len(open) > 0 {
		sort.Strings(open)
		return &StepResult{Error: "breaker open for master " + strings.Join(open, ", ")}
	}
	return &StepResult{OK: true}
}

// clusterVerdict is the Cluster rule: some master serves, or with
// allShards every master does (and no master's breaker is open).
func (r *Report) clusterVerdict(allShards bool) bool {
	serving := 0
	for _, m := range r.Masters {
		if m.OK {
			serving++
		}
	}
	if allShards {
		return serving == len(r.Masters) && serving > 0 && (r.Breakers == nil || r.Breakers.OK)
	}
	return serving > 0
}

// clusterString is String's text after the verdict for a Cluster check
// that reached the masters. A check that is unhealthy while some master
// serves required every shard: that is the only reason clusterVerdict has.
func (r Report) clusterString(b *strings.Builder) {
	serving := len(r.Masters) - len(r.MastersDown)
	fmt.Fprintf(b, "cluster): %d of %d masters serve", serving, len(r.Masters))
	var slowest time.Duration
	for _, m := range r.Masters {
		if m.OK {
			slowest = max(slowest, m.Latency)
		}
	}
	if serving > 0 {
		asked := "ping, cluster_state"
		if r.Write != nil {
			asked += ", write"
		}
		fmt.Fprintf(b, " (%s; slowest %v)", asked, slowest.Round(time.Microsecond))
	}
	if !r.Healthy && serving > 0 {
		b.WriteString(", and every one is required")
	}
	for _, m := range r.Masters {
		if !m.OK {
			b.WriteString("; down " + m.Node + ": " + m.Error)
		}
	}
	if r.Breakers != nil && !r.Breakers.OK && !r.Breakers.Skipped {
		b.WriteString("; " + r.Breakers.Error)
	}
	r.writeSlow(b)
}
