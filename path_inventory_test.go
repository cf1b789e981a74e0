package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/faultproxy"
	"github.com/redisguard/redisguard/internal/redistest"
)

// TestPathInventory holds the no-repeat rule and the error contract
// (docs/repeat.md) to every way a command can be sent, on real servers, each
// node behind a fault proxy (in Cluster mode the nodes announce the
// proxies, so the slot map, MOVED and ASK lead through them too), under two
// faults that strike after the server has run the command:
//
//   - lost reply: the reply to the command is lost and its connection
//     reset;
//   - hung node: the node runs what it is sent and answers nothing, until
//     its breaker opens on its silence (HungNodeAfter, 400ms by default)
//     and cuts its connections.
//
// An INCR, not safe to repeat, must have run exactly once (the counter is
// read on the servers once the fault has cleared and the client answers
// again) and end with ErrOutcomeUnknown. A SET, safe to repeat, must end
// answered, or with ErrNodeFailed or ErrNodeUnavailable, never with
// ErrOutcomeUnknown. On the script paths the safe command is the read-only
// script (EVAL_RO, EVALSHA_RO, Script.RunRO) reading the key: a script that
// writes is never safe to repeat. Every error the call hands the caller,
// the command's own and its batch's, must be a *NodeError, a sentinel of
// redisguard's, the context's error or a Redis reply: never a network error
// as the transport raised it.
func TestPathInventory(t *testing.T) {
	start := time.Now()
	var rep invReport
	t.Cleanup(func() { rep.print(t, time.Since(start)) })
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.StartServer(t)
		env := &invEnv{proxies: map[*redistest.Server]*faultproxy.Proxy{srv: invProxy(t, srv.Port)}, masters: []*redistest.Server{srv}}
		cfg := Config{Addrs: []string{env.proxies[srv].Addr()}, Mode: ModeStandalone}
		for _, p := range invPaths {
			env.run(t, &rep, p.name, p, env.direct, cfg)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		env := startInvCluster(t)
		cfg := Config{Addrs: env.cl.ClientAddrs(), Mode: ModeCluster}
		for _, p := range invPaths {
			env.run(t, &rep, p.name, p, env.direct, cfg)
		}
		for _, redirect := range []struct {
			name  string
			place func(t *testing.T, p invPath) invSetup
		}{{"ASK", env.ask}, {"MOVED", env.moved}} {
			for _, p := range invPaths {
				if !p.redirected {
					continue
				}
				name := redirect.name
				if p.name != "command" {
					name += " " + p.name
				}
				env.run(t, &rep, name, p, redirect.place, cfg)
			}
		}
	})
}

// invPath is one way of sending a command. send sends the INCR (unsafe) or
// its safe counterpart on k.key, calling arm, which puts the fault in
// place, right before the command goes out, and returns what the caller
// got.
type invPath struct {
	name string
	// script says the safe counterpart is a read-only script reading the
	// key, which the case seeds with "v", rather than a SET.
	script bool
	// redirected says the path also runs with its key's slot redirected
	// (ASK, MOVED) in Cluster mode: the paths with a redirect loop of
	// their own in go-redis.
	redirected bool
	// tx says the command is sent inside MULTI/EXEC.
	tx bool
	// watch says the transaction runs under WATCH (Client.Watch).
	watch bool
	send  func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent
}

// once reports whether a command safe to repeat is still not sent again
// after its reply was lost, in Cluster mode (cluster) or not: a Watch
// transaction, whose WATCH went with its connection (the Watch function's
// caller retries), and a Cluster transaction, which go-redis's transaction
// loop takes for possibly committed once its replies were cut, and ends
// with the error (ErrNodeFailed; go-redis alone ends the same way).
func (p invPath) once(cluster bool) bool { return p.watch || (cluster && p.tx) }

// invKeys are a case's keys, in one slot: the command's key and a key the
// batches read beside it, which never exists; no companion ("") leaves the
// command alone in its batch.
type invKeys struct{ key, companion string }

func invKeysFor(prefix string) invKeys {
	return invKeys{key: "{" + prefix + "}:k", companion: "{" + prefix + "}:c"}
}

// invSent is what a call handed its caller: the command's own error, its
// reply on the script paths, and every error the call returned.
type invSent struct {
	err   error
	reply any
	seen  []error
}

func sentCmd(cmd redis.Cmder, batchErr ...error) invSent {
	s := invSent{err: cmd.Err(), seen: append([]error{cmd.Err()}, batchErr...)}
	if c, ok := cmd.(*redis.Cmd); ok {
		s.reply = c.Val()
	}
	return s
}

func sentBatch(cmds []redis.Cmder, own redis.Cmder, err error) invSent {
	s := sentCmd(own, err)
	for _, c := range cmds {
		s.seen = append(s.seen, c.Err())
	}
	return s
}

// invCmdable is what every path can send the two commands on.
type invCmdable interface {
	Incr(ctx context.Context, key string) *redis.IntCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Get(ctx context.Context, key string) *redis.StringCmd
}

func invCmd(ctx context.Context, c invCmdable, key string, unsafe bool) redis.Cmder {
	if unsafe {
		return c.Incr(ctx, key)
	}
	return c.Set(ctx, key, "v", 0)
}

const (
	invIncrScript = "return redis.call('INCR', KEYS[1])"
	invGetScript  = "return redis.call('GET', KEYS[1])"
)

var invPaths = []invPath{
	{name: "command", redirected: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		arm()
		return sentCmd(invCmd(ctx, c, k.key, unsafe))
	}},
	{name: "Pipelined", redirected: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		var own redis.Cmder
		arm()
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			if k.companion != "" {
				p.Get(ctx, k.companion)
			}
			own = invCmd(ctx, p, k.key, unsafe)
			return nil
		})
		return sentBatch(cmds, own, err)
	}},
	{name: "TxPipelined", redirected: true, tx: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		var own redis.Cmder
		arm()
		cmds, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if k.companion != "" {
				p.Get(ctx, k.companion)
			}
			own = invCmd(ctx, p, k.key, unsafe)
			return nil
		})
		return sentBatch(cmds, own, err)
	}},
	{name: "AutoPipeline", redirected: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		ap, err := c.AutoPipeline()
		if err != nil {
			return invSent{err: err, seen: []error{err}}
		}
		arm()
		return sentCmd(invCmd(ctx, ap, k.key, unsafe))
	}},
	{name: "AsyncAutoPipeline", redirected: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		ap, err := c.AsyncAutoPipeline()
		if err != nil {
			return invSent{err: err, seen: []error{err}}
		}
		arm()
		cmd := invCmd(ctx, ap, k.key, unsafe)
		return sentCmd(cmd) // Err waits for the batch
	}},
	{name: "Watch", tx: true, watch: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		var own redis.Cmder
		var cmds []redis.Cmder
		var txErr error
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			if err := tx.Get(ctx, k.key).Err(); err != nil && err != redis.Nil {
				return err
			}
			arm() // the transaction meets the fault, not the WATCH
			cmds, txErr = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				own = invCmd(ctx, p, k.key, unsafe)
				return nil
			})
			return txErr
		}, k.key)
		if own == nil {
			return invSent{err: err, seen: []error{err}}
		}
		s := sentBatch(cmds, own, txErr)
		s.seen = append(s.seen, err)
		return s
	}},
	{name: "Eval", script: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		arm()
		if unsafe {
			return sentCmd(c.Eval(ctx, invIncrScript, []string{k.key}))
		}
		return sentCmd(c.EvalRO(ctx, invGetScript, []string{k.key}))
	}},
	{name: "EvalSha", script: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		src := invGetScript
		if unsafe {
			src = invIncrScript
		}
		sha, err := c.ScriptLoad(ctx, src).Result()
		if err != nil {
			return invSent{err: err, seen: []error{err}}
		}
		arm()
		if unsafe {
			return sentCmd(c.EvalSha(ctx, sha, []string{k.key}))
		}
		return sentCmd(c.EvalShaRO(ctx, sha, []string{k.key}))
	}},
	{name: "Script.Run", script: true, send: func(ctx context.Context, c *Client, k invKeys, unsafe bool, arm func()) invSent {
		src := invGetScript
		if unsafe {
			src = invIncrScript
		}
		script := redis.NewScript(src)
		if err := script.Load(ctx, c).Err(); err != nil {
			return invSent{err: err, seen: []error{err}}
		}
		// Cached, so EVALSHA runs it: a fault after it must not make Run
		// fall back to EVAL, which would run it again.
		arm()
		if unsafe {
			return sentCmd(script.Run(ctx, c, []string{k.key}))
		}
		return sentCmd(script.RunRO(ctx, c, []string{k.key}))
	}},
}

// invFault puts a fault on the proxy in front of the node the command ends
// on; key names the command's key.
type invFault struct {
	name string
	arm  func(p *faultproxy.Proxy, key string) error
	// retried: the node keeps serving, so a command safe to repeat is
	// sent again and answered.
	retried bool
}

var invFaults = []invFault{
	// The reply to the request with the key, not to a slot-map reload
	// that a redirect starts beside it.
	{"lost reply", func(p *faultproxy.Proxy, key string) error { return p.LoseReplyTo(key) }, true},
	{"hung node", func(p *faultproxy.Proxy, _ string) error { return p.SetMode(faultproxy.DropReplies) }, false},
}

// invSetup is where a case sends its command.
type invSetup struct {
	keys   invKeys
	warm   []invKeys // sent on before the fault: connections, scripts and slot map in place
	before func()    // run after the warm-up, before the fault
	target *redistest.Server
}

// invEnv is the servers of one mode, each behind its proxy.
type invEnv struct {
	cl      *redistest.Cluster // nil in Standalone mode
	masters []*redistest.Server
	proxies map[*redistest.Server]*faultproxy.Proxy

	mu    sync.Mutex
	slots map[int]bool // slots a case has used: each case gets its own
	n     int          // key prefixes handed out
}

// invProxy starts a proxy to the node on port, closed when the test ends.
func invProxy(t *testing.T, port int) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// startInvCluster starts two masters, each announcing the port of a proxy
// in front of it.
func startInvCluster(t *testing.T) *invEnv {
	byPort := map[int]*faultproxy.Proxy{}
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 2, Announce: func(port int) int {
		p := invProxy(t, port)
		byPort[port] = p
		_, to, _ := net.SplitHostPort(p.Addr())
		n, _ := strconv.Atoi(to)
		return n
	}})
	env := &invEnv{cl: cl, masters: cl.Masters, proxies: map[*redistest.Server]*faultproxy.Proxy{}, slots: map[int]bool{}}
	for _, m := range cl.Masters {
		env.proxies[m] = byPort[m.Port]
	}
	return env
}

// freshKeys returns keys no case has used yet; in Cluster mode in a slot
// of owner's that no case has used.
func (e *invEnv) freshKeys(t *testing.T, owner *redistest.Server) invKeys {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cl == nil {
		e.n++
		return invKeysFor("inv" + strconv.Itoa(e.n))
	}
	for {
		e.n++
		tag := e.cl.KeyOn(t, owner, "inv"+strconv.Itoa(e.n)+":")
		if slot := redistest.Slot(tag); !e.slots[slot] {
			e.slots[slot] = true
			return invKeysFor(tag)
		}
	}
}

// direct sends the command to its slot's owner, the first master.
func (e *invEnv) direct(t *testing.T, _ invPath) invSetup {
	k := e.freshKeys(t, e.masters[0])
	return invSetup{keys: k, warm: []invKeys{{key: k.key + "w", companion: k.companion}}, target: e.masters[0]}
}

// ask leaves the key's slot MIGRATING on its owner, the first master, and
// IMPORTING on the second; the key is on neither, so the owner answers ASK
// and the command ends on the second master, after ASKING. A transaction
// holds the key alone: the importing master answers TRYAGAIN to one over
// keys that are not all there yet.
func (e *invEnv) ask(t *testing.T, p invPath) invSetup {
	from, to := e.masters[0], e.masters[1]
	k := e.freshKeys(t, from)
	slot := redistest.Slot(k.key)
	ctx := testCtx(t, 10*time.Second)
	require.NoError(t, to.Admin().Do(ctx, "cluster", "setslot", slot, "importing", e.cl.NodeID(t, from)).Err())
	require.NoError(t, from.Admin().Do(ctx, "cluster", "setslot", slot, "migrating", e.cl.NodeID(t, to)).Err())
	if p.tx {
		k.companion = ""
	}
	// The warm-up key shares the slot, and is absent on the owner too: it
	// takes the same way.
	return invSetup{keys: k, warm: []invKeys{{key: k.key + "w", companion: k.companion}}, target: to}
}

// moved moves the key's empty slot from the first master to the second
// after the client has read the slot map, so that the client sends the
// command to the first, which answers MOVED.
func (e *invEnv) moved(t *testing.T, _ invPath) invSetup {
	from, to := e.masters[0], e.masters[1]
	k := e.freshKeys(t, from)
	// The slot that moves must stay empty: the warm-up uses others, one on
	// each master.
	warm := []invKeys{e.freshKeys(t, from), e.freshKeys(t, to)}
	return invSetup{keys: k, warm: warm, target: to, before: func() { migrateSlot(t, e.cl, redistest.Slot(k.key), from, to) }}
}

// run runs path under every fault with each of its two commands, as
// subtests "<name>/<fault>/<command>".
func (e *invEnv) run(t *testing.T, rep *invReport, name string, p invPath, place func(*testing.T, invPath) invSetup, cfg Config) {
	t.Run(name, func(t *testing.T) {
		for _, f := range invFaults {
			t.Run(f.name, func(t *testing.T) {
				for _, unsafe := range []bool{true, false} {
					cmdName := "INCR"
					if !unsafe {
						cmdName = "SET"
						if p.script {
							cmdName = "GET script"
						}
					}
					t.Run(cmdName, func(t *testing.T) {
						e.runCase(t, rep, p, f, unsafe, place(t, p), cfg)
					})
				}
			})
		}
	})
}

// runCase sends one command down one path under one fault, on a client of
// its own, and checks what the caller got and what the servers ran.
func (e *invEnv) runCase(t *testing.T, rep *invReport, p invPath, f invFault, unsafe bool, s invSetup, cfg Config) {
	ctx := testCtx(t, 20*time.Second)
	c := newTestClient(t, cfg)
	proxy := e.proxies[s.target]
	row := invRow{path: t.Name(), ran: "-", err: "(not sent)"}
	defer func() {
		row.failed = t.Failed()
		rep.add(row)
	}()
	if p.script && !unsafe {
		require.NoError(t, e.seed(ctx, s.keys.key))
	}
	// The warm-up sends the same thing the same way on another key, so
	// that what the fault meets is the command: a connection handshake
	// would meet it first otherwise.
	for _, w := range s.warm {
		got := p.send(ctx, c, w, unsafe, func() {})
		require.True(t, got.err == nil || got.err == redis.Nil, "warm-up on %s: %v", w.key, got.err)
	}
	if s.before != nil {
		s.before()
	}
	armed := false
	sent := p.send(ctx, c, s.keys, unsafe, func() {
		require.NoError(t, f.arm(proxy, s.keys.key))
		armed = true
	})
	require.NoError(t, proxy.SetMode(faultproxy.Pass))
	require.True(t, armed, "the path never reached its command: %v", sent.err)

	// The fault has cleared once the client answers for the key again:
	// the breaker the hung node opened has let a probe through.
	redistest.WaitFor(t, 10*time.Second, "the client to answer for "+s.keys.key, func() error {
		if err := c.Get(ctx, s.keys.key).Err(); err != nil && err != redis.Nil {
			return err
		}
		return nil
	})
	values := e.values(t, ctx, s.keys.key)

	row.err = invErrKind(sent.err)
	for _, err := range sent.seen {
		if !invDocumented(ctx, err) {
			t.Errorf("an error outside the documented set reached the caller: %T %v", err, err)
			if kind := fmt.Sprintf("%T", err); !slices.Contains(row.raw, kind) {
				row.raw = append(row.raw, kind)
			}
		}
	}
	if unsafe {
		var n int64
		for _, v := range values {
			x, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err, "counter %s = %q", s.keys.key, v)
			n += x
		}
		row.ran = strconv.FormatInt(n, 10)
		assert.Equal(t, int64(1), n, "INCR %s ran %d times (values on the masters: %v); the caller got %v", s.keys.key, n, values, sent.err)
		assert.ErrorIs(t, sent.err, ErrOutcomeUnknown)
	} else {
		assert.NotErrorIs(t, sent.err, ErrOutcomeUnknown, "a command safe to repeat")
		if f.retried && !p.once(e.cl != nil) {
			// The connection was reset with the reply lost: the command
			// is sent again on another, and answered.
			assert.NoError(t, sent.err, "a command safe to repeat, its reply lost, was not retried and answered")
		}
		if sent.err != nil {
			assert.True(t, errors.Is(sent.err, ErrNodeFailed) || errors.Is(sent.err, ErrNodeUnavailable),
				"%s: want it answered, or ErrNodeFailed or ErrNodeUnavailable; got %T %v", row.err, sent.err, sent.err)
		} else if p.script {
			assert.Equal(t, "v", sent.reply, "the read-only script's reply")
		} else {
			assert.Equal(t, []string{"v"}, values, "SET answered OK: the value is on the server")
		}
	}
}

// seed sets key to "v" on the master that serves its slot now.
func (e *invEnv) seed(ctx context.Context, key string) error {
	if e.cl == nil {
		return e.masters[0].Admin().Set(ctx, key, "v", 0).Err()
	}
	var errs []error
	for _, m := range e.masters {
		err := m.Admin().Set(ctx, key, "v", 0).Err()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// values returns key's value on each master that holds it, read on the
// servers themselves; ASKING first, so that a slot's importing master
// answers for the keys it already holds.
func (e *invEnv) values(t *testing.T, ctx context.Context, key string) []string {
	t.Helper()
	var out []string
	for _, m := range e.masters {
		var get *redis.StringCmd
		_, _ = m.Admin().Pipelined(ctx, func(p redis.Pipeliner) error {
			if e.cl != nil {
				p.Do(ctx, "asking")
			}
			get = p.Get(ctx, key)
			return nil
		})
		v, err := get.Result()
		_, moved := redis.IsMovedError(err)
		_, ask := redis.IsAskError(err)
		switch {
		case err == nil:
			out = append(out, v)
		case err == redis.Nil, moved, ask:
		default:
			t.Fatalf("GET %s on %s: %v", key, m.Addr, err)
		}
	}
	return out
}

// invSentinels are redisguard's exported errors.
var invSentinels = []error{
	ErrClosed, ErrNodeUnavailable, ErrNodeSlow, ErrPoolExhausted, ErrClusterFailover, ErrSlotMapCorruption,
	ErrOutcomeUnknown, ErrNodeFailed, ErrNotServing, ErrBlockingInWatch, ErrHoldingCommand,
}

// invDocumented reports whether err, as the caller got it, is in the
// documented set: nil, a *NodeError, a sentinel of redisguard's, the
// context's own error, or a reply from Redis. The value itself is judged,
// not what it wraps: a *NodeError wraps the network's error on purpose.
func invDocumented(ctx context.Context, err error) bool {
	if err == nil || err == ctx.Err() || err == context.Canceled || err == context.DeadlineExceeded {
		return true
	}
	switch err.(type) {
	case *NodeError, redis.Error:
		return true
	}
	for _, s := range invSentinels {
		if err == s {
			return true
		}
	}
	return false
}

// invErrKind names what err is, for the report.
func invErrKind(err error) string {
	switch {
	case err == nil:
		return "answered"
	case err == redis.Nil:
		return "nil reply"
	}
	for _, s := range invSentinels {
		if errors.Is(err, s) {
			return strings.TrimPrefix(s.Error(), "redisguard: ")
		}
	}
	msg := err.Error()
	if len(msg) > 40 {
		msg = msg[:40] + "..."
	}
	if isRedisReply(err) {
		return "reply " + msg
	}
	return fmt.Sprintf("%T %s", err, msg)
}

// invReport collects the cases' outcomes for the table the test prints.
type invReport struct {
	mu   sync.Mutex
	rows []invRow
}

type invRow struct {
	path   string   // the subtest's name
	ran    string   // how often the INCR ran; "-" for the safe command
	err    string   // what the caller got for the command
	raw    []string // the types of the errors outside the documented set
	failed bool
}

func (r *invReport) add(row invRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, row)
}

func (r *invReport) print(t *testing.T, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Standalone first, each mode's cases in the order they ran.
	slices.SortStableFunc(r.rows, func(a, b invRow) int {
		return strings.Compare(strings.Split(b.path, "/")[1], strings.Split(a.path, "/")[1])
	})
	rows := make([][]string, 0, len(r.rows))
	for _, row := range r.rows {
		verdict := "ok"
		if row.failed {
			verdict = "FAIL"
		}
		raw := "-"
		if len(row.raw) > 0 {
			raw = strings.Join(row.raw, ", ")
		}
		rows = append(rows, []string{strings.TrimPrefix(row.path, "TestPathInventory/"), row.ran, row.err, raw, verdict})
	}
	table(t, fmt.Sprintf("every send path under a lost reply and a hung node (%d cases, %v)", len(rows), took.Round(100*time.Millisecond)),
		[]string{"case", "INCR ran", "the caller got", "undocumented errors", ""}, rows...)
}
