package redisguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admission keeps two capacity budgets apart, so that commands which hold a
// connection for seconds (BLPOP, XREAD BLOCK, subscriptions) can never take
// every connection away from commands that answer in microseconds.
//
// Ordinary commands, pipelines and transactions use the ordinary client's
// pool: MaxConnections per node. Long operations (blocking calls, non-
// transactional batches that contain one, open subscriptions) first take one
// of MaxLongConnections permits, shared by every node, and then run on
// connections of their own:
//
//   - Blocking calls and batches run on a second go-redis client, built on
//     the first long call, each call on a dedicated connection whose CLIENT
//     ID is known, so that cancelling the call can end it on the server
//     without losing data (see run).
//   - Subscriptions use go-redis's PubSub connections, which never came from
//     the ordinary pool; a subscription connection holds its permit from its
//     dial to its close (see subscriptionBudget).
//
// When no permit frees up within PoolTimeout the call fails with
// ErrPoolExhausted before anything is sent, exactly like an exhausted
// ordinary pool: not retried, not a node fault.

var (
	// ErrBlockingInWatch is returned at once, with nothing sent, for a
	// blocking command (or a non-transactional batch containing one) issued
	// on the Tx inside Watch. There it would park the transaction's own
	// connection, which is ordinary capacity, for as long as it blocks.
	// Queue it in TxPipelined instead, where Redis never blocks, or issue it
	// outside Watch.
	ErrBlockingInWatch = errors.New("redisguard: blocking command inside Watch")

	// ErrHoldingCommand is returned at once for SUBSCRIBE, PSUBSCRIBE,
	// SSUBSCRIBE and MONITOR sent as plain commands (Do, Process, Monitor or
	// in a pipeline): each turns a pooled connection into a push stream that
	// nothing reads. Use Subscribe, PSubscribe or SSubscribe. MONITOR is not
	// supported at all: go-redis v9's MonitorCmd reads its connection from a
	// goroutine after handing it back to the pool, which races with the
	// pool's own reads (RESP3) and can deadlock Start; use redis-cli.
	ErrHoldingCommand = errors.New("redisguard: SUBSCRIBE or MONITOR sent as a plain command")

	errSubscribeCommand = fmt.Errorf("%w; use Subscribe, PSubscribe or SSubscribe", ErrHoldingCommand)
	errMonitorCommand   = fmt.Errorf("%w; MONITOR is not supported, use redis-cli", ErrHoldingCommand)
)

// unblockGrace bounds how long a call cancelled by its deadline may take to
// wind down when its server does not answer: the call's socket deadline is
// the caller's deadline plus unblockGrace. It also bounds each CLIENT
// UNBLOCK.
const unblockGrace = time.Second

// admission holds the long budget and the long client.
type admission struct {
	c       *Client
	permits chan struct{} // one token per long permit in use; cap MaxLongConnections
	closing chan struct{} // closed by close: wakes permit waiters and unblock loops

	exhaustions atomic.Uint64 // long operations refused with ErrPoolExhausted
	exhaustLog  logLimiter    // keeps a saturated budget from flooding the log

	mu     sync.Mutex
	closed bool                    // guarded by mu
	long   redis.UniversalClient   // guarded by mu; nil until the first long call
	idle   map[string][]*dedicated // guarded by mu; dedicated connections not in use, by node address
	loops  sync.WaitGroup          // unblock loops; Add only under mu while !closed
}

func newAdmission(c *Client) *admission {
	return &admission{
		c:       c,
		permits: make(chan struct{}, c.cfg.MaxLongConnections),
		closing: make(chan struct{}),
		idle:    make(map[string][]*dedicated),
	}
}

// acquire takes a long permit, waiting at most PoolTimeout. A channel rather
// than x/sync's semaphore: its length is the Stats figure, and a wait can
// select on Close.
func (a *admission) acquire(ctx context.Context) error {
	select {
	case a.permits <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(a.c.cfg.PoolTimeout)
	defer t.Stop()
	select {
	case a.permits <- struct{}{}:
		return nil
	case <-t.C:
		a.exhaustions.Add(1)
		a.c.emitLimited(Event{Kind: EventPoolExhausted, Budget: BudgetLong}, &a.exhaustLog)
		return ErrPoolExhausted
	case <-ctx.Done():
		return ctx.Err()
	case <-a.closing:
		return ErrClosed
	}
}

func (a *admission) release() { <-a.permits }

// client returns the long client, building it on first use.
func (a *admission) client() (redis.UniversalClient, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	if a.long == nil {
		a.long = a.build()
	}
	return a.long, nil
}

// build makes the long client with build, like the ordinary one. Its pools
// never bind: a node holds at most MaxLongConnections dedicated connections
// (see take) plus as many pooled ones for Cluster batches and redirects, and
// one for CLIENT UNBLOCK; the permits are the budget.
func (a *admission) build() redis.UniversalClient {
	c := a.c
	size := 2*c.cfg.MaxLongConnections + 1
	if c.cfg.Mode == ModeCluster {
		// Node clients carry the shared breakers; attaching the client makes
		// its CLUSTER SLOTS go through the shared single-flight cache.
		cc := c.build(size).(*redis.ClusterClient)
		c.topo.attach(cc)
		return cc
	}
	// In Standalone and Sentinel mode build installs the node's guard on the
	// ordinary client outside facadeHook, so that guard already admits and
	// scores every long call facadeHook hands over. The long client's guards
	// get their breakers turned off: a second guard on the shared breaker
	// would count each call twice and, half-open, reject the very probe the
	// outer guard let through, so a worker that only blocks could never
	// close its breaker again.
	shadow := &Client{cfg: c.cfg, log: c.log, clock: c.clock}
	shadow.cfg.NodeFailureThreshold = -1
	shadow.nodes = newNodeSet(shadow)
	return shadow.build(size)
}

// close ends the long budget: permit waiters and unblock loops return, idle
// dedicated connections and the long client are closed, which cuts short the
// calls still running on it.
func (a *admission) close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.closing)
	idle, long := a.idle, a.long
	a.idle = nil
	a.mu.Unlock()
	for _, list := range idle {
		for _, d := range list {
			_ = d.conn.Close()
		}
	}
	var err error
	if long != nil {
		err = long.Close() // fails the CLIENT UNBLOCKs in flight at once
	}
	a.loops.Wait()
	return err
}

// process runs a blocking or holding command that facadeHook handed over;
// inWatch marks the hook chains of a Watch transaction.
func (a *admission) process(ctx context.Context, cmd redis.Cmder, class cmdClass, inWatch bool) error {
	switch {
	case class == classHolding:
		return holdingErr(cmd)
	case inWatch:
		return ErrBlockingInWatch
	}
	long, err := a.enter(ctx)
	if err != nil {
		return err
	}
	defer a.release()
	cc, cluster := long.(*redis.ClusterClient)
	if !cluster {
		return a.onDedicated(ctx, long.(*redis.Client), "", func(ctx context.Context, conn *redis.Conn) error {
			return conn.Process(ctx, cmd)
		})
	}
	key, ok := blockingKey(cmd.Args())
	if !ok {
		// WAIT and WAITAOF have no key: go-redis routes them. Cancellation
		// is then go-redis's own: deadlines only.
		return cc.Process(ctx, cmd)
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	err = a.onDedicated(ctx, node, node.Options().Addr, func(ctx context.Context, conn *redis.Conn) error {
		return conn.Process(ctx, cmd)
	})
	if isRedirect(err) {
		// The slot moved after the map was read: go-redis follows the
		// redirect and reloads the map.
		cmd.SetErr(nil)
		return cc.Process(ctx, cmd)
	}
	return err
}

// enter admits one long operation: it checks ctx, takes a permit and returns
// the long client, built on first use. After a nil error the caller must
// release the permit when the operation ends.
func (a *admission) enter(ctx context.Context) (redis.UniversalClient, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := a.acquire(ctx); err != nil {
		return nil, err
	}
	long, err := a.client()
	if err != nil {
		a.release()
		return nil, err
	}
	return long, nil
}

// processBatch runs a non-transactional pipeline containing a blocking
// command: one permit for the whole batch, on the long client, in order.
func (a *admission) processBatch(ctx context.Context, cmds []redis.Cmder, inWatch bool) error {
	err := a.batch(ctx, cmds, inWatch)
	if ctxErr := ctx.Err(); ctxErr != nil {
		for _, cmd := range cmds {
			if isUnblocked(cmd.Err()) {
				cmd.SetErr(ctxErr) // ended by our CLIENT UNBLOCK on cancellation
			}
		}
	}
	if err != nil && err != redis.Nil && !isRedisReply(err) {
		for _, cmd := range cmds {
			if cmd.Err() == nil {
				cmd.SetErr(err)
			}
		}
	}
	return err
}

func (a *admission) batch(ctx context.Context, cmds []redis.Cmder, inWatch bool) error {
	for _, cmd := range cmds {
		if classifyCmd(cmd) == classHolding {
			return holdingErr(cmd)
		}
	}
	if inWatch {
		return ErrBlockingInWatch
	}
	long, err := a.enter(ctx)
	if err != nil {
		return err
	}
	defer a.release()
	exec := func(ctx context.Context, p redis.Pipeliner) error {
		for _, cmd := range cmds {
			_ = p.Process(ctx, cmd)
		}
		_, err := p.Exec(ctx)
		return err
	}
	if cc, ok := long.(*redis.ClusterClient); ok {
		// go-redis splits the batch by node and keeps each node's order.
		// Cancellation is go-redis's own here: deadlines only.
		return exec(ctx, cc.Pipeline())
	}
	return a.onDedicated(ctx, long.(*redis.Client), "", func(ctx context.Context, conn *redis.Conn) error {
		return exec(ctx, conn.Pipeline())
	})
}

// dedicated is one long connection, kept across calls so that its CLIENT ID
// is learned once.
//
// Its fields are fixed at creation; the call that took it from the idle
// list owns it until put.
type dedicated struct {
	node *redis.Client // the node's long client; CLIENT UNBLOCK goes through its pool
	conn *redis.Conn   // holds one connection of node's pool for its whole life
	id   int64         // the connection's CLIENT ID; 0 if the server has none (Redis numbers clients from 1)
	key  string        // node address: the idle list it returns to
}

// onDedicated runs do on a dedicated connection to node, and once more on a
// fresh one if an idle connection turns out to have died meanwhile (a server
// idle timeout, CLIENT KILL): go-redis would retry a pooled one the same way.
func (a *admission) onDedicated(ctx context.Context, node *redis.Client, key string, do func(context.Context, *redis.Conn) error) error {
	for attempt := 0; ; attempt++ {
		d, reused, err := a.take(ctx, node, key)
		if err != nil {
			return err
		}
		cancelled, err := a.run(ctx, d, do)
		a.put(d, err) // d may serve another call from here on
		if !cancelled && reused && attempt == 0 && isConnReset(err) && !errors.Is(err, ErrClosed) {
			continue
		}
		if !cancelled {
			return err
		}
		switch {
		case err == nil:
			return nil // the reply beat the cancellation: deliver it rather than lose it
		case err != redis.Nil && isRedisReply(err) && !isUnblocked(err):
			return err
		}
		return ctx.Err()
	}
}

// take returns an idle dedicated connection to the node, or opens one;
// reused reports which. A node never has more than MaxLongConnections of
// them: one is opened only when none is idle, by a caller holding a permit.
func (a *admission) take(ctx context.Context, node *redis.Client, key string) (d *dedicated, reused bool, err error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, false, ErrClosed
	}
	if list := a.idle[key]; len(list) > 0 {
		d := list[len(list)-1]
		list[len(list)-1] = nil
		a.idle[key] = list[:len(list)-1]
		a.mu.Unlock()
		return d, true, nil
	}
	a.mu.Unlock()
	conn := node.Conn()
	// The first command claims the connection and learns the id the server
	// knows it by. A server or proxy without CLIENT ID (miniredis, some
	// managed proxies) answers with an error reply; the connection then
	// works as go-redis's would, cancelled by deadlines only.
	id, err := conn.ClientID(ctx).Result()
	if err != nil && !isRedisReply(err) {
		_ = conn.Close()
		return nil, false, err
	}
	return &dedicated{node: node, conn: conn, id: id, key: key}, false, nil
}

// put keeps d for the next call, unless the call ended in a way that may
// leave an unread reply on it.
func (a *admission) put(d *dedicated, err error) {
	if reusable(err) {
		a.mu.Lock()
		if !a.closed {
			a.idle[d.key] = append(a.idle[d.key], d)
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
	}
	_ = d.conn.Close()
}

// run executes do on d so that cancelling ctx ends the call without losing
// data and without leaving a reply behind for the next caller.
//
// go-redis reads a reply until the socket deadline it derives from ctx and
// does not watch for cancellation. Were the socket deadline to fire first,
// an element popped at that instant would be lost with the abandoned
// connection. So the read runs under a context without ctx's cancellation
// and with a deadline unblockGrace later, and when ctx ends, CLIENT UNBLOCK
// ... ERROR on another connection makes the server end the call before it
// pops anything (see unblock). The reply (-UNBLOCKED, or an element that won
// the race) is then read as usual, and the connection is clean. cancelled reports whether that
// happened; the caller maps the result.
func (a *admission) run(ctx context.Context, d *dedicated, do func(context.Context, *redis.Conn) error) (cancelled bool, err error) {
	if ctx.Done() == nil || d.id == 0 {
		return false, do(ctx, d.conn)
	}
	runCtx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithDeadline(runCtx, deadline.Add(unblockGrace))
		defer cancel()
	}
	finished := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			return // Close is cutting the call short anyway
		}
		a.loops.Add(1)
		a.mu.Unlock()
		defer a.loops.Done()
		a.unblock(d, finished)
	})
	err = do(runCtx, d.conn)
	close(finished)
	if stop() {
		return false, err
	}
	if reusable(err) {
		// The connection goes back to the idle list: first let the loop
		// stop, so that no CLIENT UNBLOCK can reach a later call on it. A
		// connection that is thrown away need not wait for a loop stuck on
		// a hung server; Close waits for it instead.
		<-unblocked
	}
	return true, err
}

// isUnblocked reports whether err is the -UNBLOCKED reply that CLIENT
// UNBLOCK ... ERROR gives the command it ended.
func isUnblocked(err error) bool {
	return isRedisReply(err) && strings.HasPrefix(err.Error(), "UNBLOCKED")
}

// reusable reports whether a dedicated connection is clean after a call
// that ended with err: a reply, even an error reply, was read in full.
func reusable(err error) bool { return err == nil || err == redis.Nil || isRedisReply(err) }

// unblock sends CLIENT UNBLOCK <id> ERROR for d until its call returns.
//
// ERROR, not TIMEOUT: a command the server has postponed (a write pause
// during CLUSTER FAILOVER, CLIENT PAUSE WRITE) is blocked without a timeout
// handler, and UNBLOCK ... TIMEOUT on it crashes Redis before 8.2 and Valkey
// before 8.1.2 ("Unknown btype in replyToBlockedClientTimedOut"; redis#14164,
// valkey#2117). The chaos soak found it. ERROR ends a blocked BLPOP without
// popping anything, just as TIMEOUT does, with an -UNBLOCKED reply that run's
// caller maps to ctx.Err(); on a postponed command it answers -UNBLOCKED to a
// command that never ran, which is just as safe. UNBLOCK
// answers 0 while the command has not reached the server yet, so it is
// retried with a growing back-off; a batch may also hold several blocking
// commands in turn. The connection is never killed instead: a call that is
// not blocked may have its reply on the way, and killing would lose it. A
// command UNBLOCK cannot end (a module's that refuses) runs to its own
// timeout or the socket deadline.
//
// Real time paces the loop: this is network back-off, not logic under test.
func (a *admission) unblock(d *dedicated, finished <-chan struct{}) {
	wait := time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), unblockGrace)
		if n, err := d.node.ClientUnblockWithError(ctx, d.id).Result(); err == nil && n == 1 {
			wait = time.Millisecond // the reply is coming; the next command may block too
		}
		cancel()
		t := time.NewTimer(wait)
		select {
		case <-finished:
			t.Stop()
			return
		case <-a.closing:
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// blockingKey returns the first key of a blocking command, which decides
// its node in Cluster mode; ok is false for the keyless WAIT and WAITAOF and
// for anything it cannot read.
func blockingKey(args []interface{}) (key string, ok bool) {
	if len(args) < 2 {
		return "", false
	}
	name, _ := args[0].(string)
	if b, isBytes := args[0].([]byte); isBytes {
		name = string(b)
	}
	pos := 1
	switch strings.ToLower(name) {
	case "wait", "waitaof":
		return "", false
	case "blmpop", "bzmpop": // timeout numkeys key...
		pos = 3
	case "xread": // [COUNT n] [BLOCK ms] STREAMS key... id...
		pos = afterToken(args, 1, "streams")
	case "xreadgroup": // GROUP group consumer [...] STREAMS key... id...
		pos = afterToken(args, 4, "streams")
	}
	if pos <= 0 || pos >= len(args) {
		return "", false
	}
	switch k := args[pos].(type) {
	case string:
		return k, true
	case []byte:
		return string(k), true
	}
	return "", false
}

// afterToken returns the position after the first argument from position
// from on that spells token, or 0.
func afterToken(args []interface{}, from int, token string) int {
	for i := from; i < len(args)-1; i++ {
		if s, ok := args[i].(string); ok && strings.EqualFold(s, token) {
			return i + 1
		}
	}
	return 0
}

// isRedirect reports whether err is a MOVED or ASK reply.
func isRedirect(err error) bool {
	if err == nil {
		return false
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

// holdingErr explains why a holding command cannot run as sent.
func holdingErr(cmd redis.Cmder) error {
	if strings.EqualFold(cmd.Name(), "monitor") {
		return errMonitorCommand
	}
	return errSubscribeCommand
}

// subscriptionBudget is installed on the ordinary client (on each node
// client in Cluster mode). go-redis dials PubSub connections through the
// client's dial hook, from PubSubPool.NewConn: one on the first subscribe,
// one per reconnect, and closes the old one before it redials. Taking the
// permit at that dial and giving it back when that connection is closed is
// therefore exactly "held while the subscription runs": an unused
// Subscribe() dials nothing, Unsubscribe keeps the connection, and
// PubSub.Close (or Client.Close) closes it. A dial for the ordinary pool
// shares the hook and passes straight through.
type subscriptionBudget struct{ a *admission }

// pubSubDialer is the go-redis function on the stack of every PubSub dial
// and of no other. go-redis offers no other way to tell the two dials
// apart; the subscription tests fail if an upgrade renames it.
const pubSubDialer = "github.com/redis/go-redis/v9/internal/pool.(*PubSubPool).NewConn"

func (h subscriptionBudget) DialHook(next redis.DialHook) redis.DialHook {
	a := h.a
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !onStack(pubSubDialer) {
			return next(ctx, network, addr)
		}
		if err := a.acquire(ctx); err != nil {
			return nil, err
		}
		conn, err := next(ctx, network, addr)
		if err != nil {
			a.release()
			return nil, err
		}
		return &subscriptionConn{Conn: conn, a: a}, nil
	}
}

func (subscriptionBudget) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (subscriptionBudget) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// subscriptionConn gives its permit back on its first Close.
type subscriptionConn struct {
	net.Conn
	a        *admission
	released atomic.Bool
}

func (c *subscriptionConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		c.a.release()
	}
	return err
}

// NetConn lets go-redis reach the socket underneath, as it does through TLS,
// to peek for pending push data.
func (c *subscriptionConn) NetConn() net.Conn { return c.Conn }

// watchGuard is added to the Tx of every Watch in Cluster mode, where the
// transaction runs on a node client that facadeHook never sees. It refuses
// long commands as facadeHook does on a transaction's chain elsewhere.
type watchGuard struct{}

func (watchGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (watchGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch classifyCmd(cmd) {
		case classBlocking:
			return ErrBlockingInWatch
		case classHolding:
			return holdingErr(cmd)
		}
		return next(ctx, cmd)
	}
}

func (watchGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !batchIsBlocking(cmds) {
			return next(ctx, cmds)
		}
		err := ErrBlockingInWatch
		for _, cmd := range cmds {
			if classifyCmd(cmd) == classHolding {
				err = holdingErr(cmd)
			}
		}
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	}
}

// watchRunner is the go-redis function on the stack while a Watch
// transaction's hook chain is built (newTx, and any AddHook inside fn).
const watchRunner = "github.com/redis/go-redis/v9.(*Client).Watch"

// buildingWatch reports whether the hook chain being built belongs to a
// Watch transaction. In Standalone and Sentinel mode the Tx clones the
// client's hooks, facadeHook included, and facadeHook must not send the
// Tx's blocking commands to the long client: they would leave the watched
// connection. A hook only learns which chain it joins from the stack. The
// cost is paid when a chain is built (per Watch, per Conn, per new
// connection's handshake), never per command. A Conn opened inside a Watch
// function counts as part of the transaction.
func (a *admission) buildingWatch() bool {
	return a.c.cfg.Mode != ModeCluster && onStack(watchRunner)
}

// onStack reports whether fn, a fully qualified function name as
// runtime.Frame spells it, is among the current goroutine's callers.
func onStack(fn string) bool {
	var pcs [64]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		if f.Function == fn {
			return true
		}
		if !more {
			return false
		}
	}
}
