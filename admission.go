package redisguard

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/background"
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

// unblockGrace bounds how long a cancelled call may take to wind down: by
// then its connection is closed if CLIENT UNBLOCK has not ended it (see
// interrupt).
const unblockGrace = time.Second

// downUnblockGrace is unblockGrace for a call on a node whose breaker is
// open (see interrupt).
const downUnblockGrace = 100 * time.Millisecond

// admission holds the long budget and the long client.
type admission struct {
	k *core
	// newLong builds the long client and the guard of a dedicated
	// connection to an address; called once, on the first long call.
	newLong func() (redis.UniversalClient, func(addr string) nodeGuard)
	permits chan struct{} // one token per long permit in use; cap MaxLongConnections
	// bg owns the interrupts of cancelled calls (dedicated.go); its context,
	// cancelled by close, also wakes permit waiters.
	bg background.Group

	exhaustions atomic.Uint64 // long operations refused with ErrPoolExhausted
	exhaustLog  logLimiter    // keeps a saturated budget from flooding the log

	// guard returns the hook that guards a dedicated connection to addr,
	// as newGoRedis installs one on every node client of the long client.
	// Set with long, under mu.
	guard func(addr string) nodeGuard
	// unblock records a server's refusal of CLIENT UNBLOCK (see interrupt).
	unblock denial
	// hooks are the Client's hooks a dedicated connection carries.
	hooks *clientHooks
	// gen counts Instrument calls: a dedicated connection or shell built
	// before the latest is closed rather than reused, so that every later
	// call runs on a connection the extension reaches. Written under mu.
	gen atomic.Uint64
	// down, if not nil, returns the refusal of the node at addr while its
	// breaker is open (refuseDown): a long call there is refused before it
	// takes a permit, and a cancelled one is cut off at once (interrupt).
	down func(addr string) error

	mu       sync.Mutex
	closed   bool                     // guarded by mu
	long     redis.UniversalClient    // guarded by mu; nil until the first long call
	idle     map[string][]*dedicated  // guarded by mu; dedicated connections not in use, by node address
	shells   map[string][]*shell      // guarded by mu; shells free for a new dedicated connection, by node address
	live     map[*dedicated]struct{}  // guarded by mu; every open dedicated connection, idle or in use
	moves    map[string]nodeMove      // guarded by mu; the latest move each node announced, by node address (dedicated_moving.go)
	controls map[string]*redis.Client // guarded by mu; CLIENT UNBLOCK's clients by endpoint, once a node moved (controlFor)
}

// newAdmission returns the long budget of k's Config. hooks are what a
// dedicated connection carries, newLong builds the long client (longClient),
// and down, if not nil, returns the refusal of the node at an address while
// its breaker is open.
func newAdmission(k *core, hooks *clientHooks, newLong func() (redis.UniversalClient, func(string) nodeGuard),
	down func(addr string) error) *admission {
	a := &admission{
		k:       k,
		hooks:   hooks,
		newLong: newLong,
		down:    down,
		permits: make(chan struct{}, k.cfg.MaxLongConnections),
		idle:    make(map[string][]*dedicated),
		shells:  make(map[string][]*shell),
		live:    make(map[*dedicated]struct{}),
	}
	if hooks != nil {
		// Blocking calls follow a node's move (dedicated_moving.go).
		hooks.whenMoving(func(key string, _ any, m movingNotice) { a.moving(key, m) })
	}
	return a
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
	t := time.NewTimer(a.k.cfg.PoolTimeout)
	defer t.Stop()
	select {
	case a.permits <- struct{}{}:
		return nil
	case <-t.C:
		a.exhaustions.Add(1)
		a.k.emitLimited(Event{Kind: EventPoolExhausted, Budget: BudgetLong}, &a.exhaustLog)
		return ErrPoolExhausted
	case <-ctx.Done():
		return ctx.Err()
	case <-a.bg.Context().Done():
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
		a.long, a.guard = a.newLong()
	}
	return a.long, nil
}

// instrument runs apply with the long client (nil until built) while no
// long client or dedicated connection is being built, then closes the idle
// dedicated connections, built without the extension apply adds; those in
// use are closed when their calls end (put).
func (a *admission) instrument(apply func(long redis.UniversalClient) error) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	err := apply(a.long)
	a.gen.Add(1)
	idle, shells := a.idle, a.shells
	a.idle, a.shells = make(map[string][]*dedicated), make(map[string][]*shell)
	for _, list := range idle {
		for _, d := range list {
			delete(a.live, d)
		}
	}
	a.mu.Unlock()
	closeAll(idle, shells)
	return err
}

// closeAll closes idle dedicated connections and free shells.
func closeAll(idle map[string][]*dedicated, shells map[string][]*shell) {
	for _, list := range idle {
		for _, d := range list {
			d.close()
		}
	}
	for _, list := range shells {
		for _, sh := range list {
			_ = sh.client.Close()
		}
	}
}

// close ends the long budget: permit waiters and interrupts return, every
// dedicated connection is closed, which cuts short the calls running on
// them (their callers then discard them), and so is the long client.
func (a *admission) close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.bg.Cancel()
	idle, live, shells, long, controls := a.idle, a.live, a.shells, a.long, a.controls
	a.idle, a.live, a.shells, a.controls = nil, nil, nil, nil
	a.mu.Unlock()
	for _, c := range controls {
		_ = c.Close() // fails the CLIENT UNBLOCKs in flight at once
	}
	for d := range live {
		d.sever()
	}
	closeAll(idle, shells)
	var err error
	if long != nil {
		err = long.Close() // fails the CLIENT UNBLOCKs in flight at once
	}
	a.bg.Close()
	return err
}

// process runs a blocking or holding command that the facade's step handed
// over before any guard admitted it; inWatch marks a command sent on the Tx
// of a Watch transaction. The guards of the long client and of the dedicated
// connections admit and score it (longClient); what they return has been
// typed for its node, and a failed set-up scored, so the set-up mark that
// admission puts on a dedicated connection's failed set-up goes no further.
func (a *admission) process(ctx context.Context, cmd redis.Cmder, class cmdClass, inWatch bool) error {
	switch {
	case class == classHolding:
		return holdingErr(cmd)
	case inWatch:
		return ErrBlockingInWatch
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	long, err := a.client()
	if err != nil {
		return err
	}
	cc, cluster := long.(*redis.ClusterClient)
	if !cluster {
		if err := a.enter(ctx, ""); err != nil {
			return err
		}
		defer a.release()
		return withoutSetup(a.onDedicated(ctx, long.(*redis.Client), "", []redis.Cmder{cmd}, func(ctx context.Context, conn *redis.Conn) error {
			return conn.Process(ctx, cmd)
		}))
	}
	key, ok := blockingKey(cmd.Args())
	if !ok {
		// WAIT and WAITAOF have no key: like go-redis, send them to the
		// master of a random slot.
		key = strconv.FormatUint(rand.Uint64(), 36)
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return err
	}
	if err := a.enter(ctx, node.Options().Addr); err != nil {
		return err
	}
	defer a.release()
	err = a.onDedicated(ctx, node, node.Options().Addr, []redis.Cmder{cmd}, func(ctx context.Context, conn *redis.Conn) error {
		return conn.Process(ctx, cmd)
	})
	if isRedirect(err) {
		// The slot moved after the map was read: go-redis follows the
		// redirect and reloads the map.
		cmd.SetErr(nil)
		return cc.Process(ctx, cmd)
	}
	return withoutSetup(err)
}

// enter admits one long operation for the node at addr, on the long client
// the caller got from client: a node whose breaker is open refuses it at
// once, before it waits for a permit, as the node's guard would; otherwise
// it takes a permit, and the caller must release it when the operation
// ends. addr is "" for Standalone's one server and Sentinel's master; a
// Cluster batch, which may span nodes, passes "" too and is refused by each
// node's guard.
func (a *admission) enter(ctx context.Context, addr string) error {
	if a.down != nil && (addr != "" || a.k.cfg.Mode != ModeCluster) {
		if err := a.down(addr); err != nil {
			return err
		}
	}
	return a.acquire(ctx)
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
	if err := ctx.Err(); err != nil {
		return err
	}
	long, err := a.client()
	if err != nil {
		return err
	}
	if err := a.enter(ctx, ""); err != nil {
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
		// go-redis splits the batch by node and keeps each node's order,
		// reading it under the context's deadline only (see build).
		// Cancellation is go-redis's own here: deadlines only.
		readCtx := withCaller(ctx, ctx)
		if deadline, ok := a.readDeadline(cmds); ok {
			var cancel context.CancelFunc
			readCtx, cancel = context.WithDeadline(readCtx, deadline)
			defer cancel()
		}
		err := exec(readCtx, cc.Pipeline())
		if contextDone(ctx) == nil {
			// go-redis retries a timed-out batch until the context ends, so
			// overdue replies come back as the context's error.
			for _, cmd := range cmds {
				if errors.Is(cmd.Err(), context.DeadlineExceeded) {
					cmd.SetErr(errRepliesOverdue)
				}
			}
			if errors.Is(err, context.DeadlineExceeded) {
				err = errRepliesOverdue
			}
		}
		return err
	}
	return withoutSetup(a.onDedicated(ctx, long.(*redis.Client), "", cmds, func(ctx context.Context, conn *redis.Conn) error {
		return exec(ctx, conn.Pipeline())
	}))
}

// errRepliesOverdue is a Cluster blocking batch's error when a node has not
// answered within its read deadline (readDeadline), the caller's context
// still running: a timeout, as go-redis reports its own read timeouts.
var errRepliesOverdue error = repliesOverdue{}

type repliesOverdue struct{}

func (repliesOverdue) Error() string {
	return "redisguard: i/o timeout: no reply within the blocking commands' own timeouts plus ReadTimeout"
}
func (repliesOverdue) Timeout() bool   { return true }
func (repliesOverdue) Temporary() bool { return false }

// Is makes the error match os.ErrDeadlineExceeded, as a socket's does.
func (repliesOverdue) Is(target error) bool { return target == os.ErrDeadlineExceeded }
