package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/breaker"
)

// nodeGuard is the hook installed on each node's go-redis client. It fails
// fast while the node's breaker is open, feeds every outcome back to the
// breaker, and keeps pool timeouts from looking like node faults.
type nodeGuard struct {
	k     *core
	nodes *nodeSet
	n     *node
	// follow, set on a Sentinel client, names the node per command: the
	// master's current address.
	follow *sentinelMaster
	// facade, set on the ordinary and Watch clients in Standalone and
	// Sentinel mode, is the facade whose step (facade.go) this hook runs
	// before its own, in place of a facadeHook outside it: one frame less
	// for every command, in the order every mode has (hookOrder).
	facade *facade
	// user, set on the ordinary client in Standalone mode, is the Client's
	// AddHook hooks, which this hook runs outside the facade's step and
	// its own while there are any, in place of the userLayer's process and
	// pipeline steps: one frame less again.
	user *userHooks
	// long, set on the long client's guards and those of dedicated
	// connections, says that everything they admit waits by design: it is
	// counted apart from the ordinary work the hang watch judges, and their
	// connections are not cut when the breaker opens (a blocking call ends
	// through admission's CLIENT UNBLOCK, never by a cut).
	long bool
	// tx, with facade, is set on the guard of the Watch client (see
	// newGoRedis), whose every chain is a Watch transaction's: the facade's
	// step refuses the blocking commands sent on it (ErrBlockingInWatch),
	// which must not leave the watched connection.
	tx bool
	// subscriptions is set on the guards of the clients that run
	// subscriptions alone (newGoRedis): every dial they see is a
	// subscription's, left to subscriptionBudget inside them, and every
	// handshake a subscription connection's, whose failure goes to the
	// PubSub's caller unmarked (nodeGuard.handshake).
	subscriptions bool
}

// node returns the node the next command is charged to.
func (g *nodeGuard) node() *node {
	if g.follow != nil {
		return g.follow.node()
	}
	return g.n
}

// ordinary has Stats count the operations waiting for or holding a
// connection of cl's pool as the ordinary operations in flight on the node
// g charges: cl is the node's ordinary client, or in Sentinel mode the
// master's.
func (g *nodeGuard) ordinary(cl *redis.Client) {
	if g.follow != nil {
		g.follow.client.Store(cl)
		return
	}
	g.n.client.Store(cl)
}

// DialHook dials the node's pool connections. A subscriptions client's
// guard leaves its dials, all subscriptions', to subscriptionBudget, inside
// it, which routes them.
//
// A pool dial never fails as go-redis's pool sees it: a failed one, or one
// refused because the node's breaker is open, "succeeds" with a
// refusedConn, whose handshake reports the failure to the command that
// wanted the connection (handshake). The pool counts failed dials and,
// after PoolSize of them, stops dialling but once a second
// (pool.tryDial); a node that comes back would wait out that second,
// which the breaker, the one thing that decides when a node is dialled,
// never asks for. A failed dial is marked as a set-up failure (setup.go):
// TLS handshakes run inside it, and their timeouts look like any read's.
//
// The connections of an ordinary client are tracked (connSet), so that an
// opening breaker answers every command waiting on one. With facade, the
// facade's dial step (a closed Client dials nothing) runs first.
func (g nodeGuard) DialHook(next redis.DialHook) redis.DialHook {
	if g.subscriptions {
		return next
	}
	dial := g.dial(next)
	if g.facade != nil {
		return facadeHook{g.facade}.DialHook(dial)
	}
	return dial
}

// dial is the guard's own dial step, before next.
func (g nodeGuard) dial(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n := g.node()
		if n.br.State() == breaker.Open {
			return refusedConn{setupFailure(n.unavailable, true)}, nil
		}
		ctx, done := n.conns.dialing(ctx)
		if g.follow != nil {
			n.resolving.Add(1)
		}
		conn, err := next(ctx, network, addr)
		if g.follow != nil {
			n.resolving.Add(-1)
		}
		done()
		switch {
		case err == nil && !g.long:
			if g.follow != nil {
				// go-redis resolved the master itself: the connection
				// belongs to the address it reached.
				n = g.nodes.get(conn.RemoteAddr().String())
			}
			return n.conns.track(conn, g.nodes.watch), nil
		case err == nil:
			return conn, nil
		case n.br.State() == breaker.Open:
			// The opening breaker cut the dial short.
			return refusedConn{setupFailure(n.unavailable, true)}, nil
		case isNetworkError(err):
			return refusedConn{setupFailure(err, false)}, nil
		}
		return refusedConn{err}, nil
	}
}

// ProcessHook allocates twice: go-redis's AutoPipeliner builds its
// client's hook chain again for every command it sends alone.
func (g nodeGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	ch := &guardChain{g: g, next: next}
	return ch.step(g.user != nil)
}

// step is the guard's process hook: with facade, the facade's step and then
// the guard's, in that order. With outer, it first hands the command to the
// user's hooks, if there are any, which end in step(false).
//
// The common command (plain by its name, answered, on a closed breaker,
// untimed) takes the first path, where the facade's step has nothing to do
// (a plain command is no long one, and an answered one needs no
// translation): one small frame between the caller and go-redis, since at
// hundreds of callers every stack line a command writes is likely a cache
// miss, and few calls, each of which costs more than its instructions there
// (docs/performance.md, "What costs what"): one look at the command
// (plainCommand), and the breaker's report decided with one read
// (Breaker.Succeeded). The command timed for slow-node marking, one in 64,
// runs in timed, one frame further down;
// everything else takes unusual, and the rare outcomes run in functions of
// their own, with few arguments. Not inlined: the closure inlined into
// ProcessHook gets a larger frame.
//
//go:noinline
func (ch *guardChain) step(outer bool) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if outer && ch.g.user.hooks.Load() != nil {
			return ch.viaUser(ctx, cmd)
		}
		n := ch.g.node()
		if ch.g.k.closed.Load() || n.slow.Load() || ch.g.long || !plainCommand(cmd.Args()) {
			return ch.unusual(ctx, cmd, n)
		}
		if ch.g.nodes.slow.sample(n) {
			return ch.timed(ctx, cmd, n)
		}
		t, err := n.admit()
		if err != nil {
			return ch.refused(ctx, cmd, n)
		}
		if err = ch.next(ctx, cmd); err == nil {
			n.succeeded(t)
			return nil
		}
		return ch.nextFailed(ctx, cmd, n, t, err)
	}
}

// timed is step's common path for a command timed for slow-node marking.
//
//go:noinline
func (ch *guardChain) timed(ctx context.Context, cmd redis.Cmder, n *node) error {
	t, err := n.admit()
	if err != nil {
		return ch.refused(ctx, cmd, n)
	}
	start := ch.g.k.clock.Now()
	err = ch.next(ctx, cmd)
	if err == nil || err == redis.Nil {
		n.succeeded(t)
		ch.g.nodes.slow.observe(ch.g.nodes, n, cmd, start)
		return err
	}
	return ch.nextFailed(ctx, cmd, n, t, err)
}

// admit asks n's breaker to let an ordinary operation through. Stats
// counts it in flight from its node client's pool (nodeSet.stats), which
// go-redis keeps anyway: a count of the guard's own would be two more
// writes per command to a cache line every core shares.
func (n *node) admit() (breaker.Ticket, error) { return n.br.Allow() }

// admitAs is admit, or for a long operation, which waits by design, the
// same without the hang watch: blocking calls and the long client's work
// are counted in n.long.
func (n *node) admitAs(long bool) (breaker.Ticket, error) {
	if !long {
		return n.admit()
	}
	t, err := n.br.Allow()
	if err == nil {
		n.long.Add(1)
	}
	return t, err
}

// succeeded ends an admitted ordinary operation that was answered (nil or
// redis.Nil), reporting the success to the breaker.
func (n *node) succeeded(t breaker.Ticket) { n.br.Succeeded(t) }

// succeededAs is succeeded for an operation admitAs admitted.
func (n *node) succeededAs(t breaker.Ticket, long bool) {
	if !long {
		n.succeeded(t)
		return
	}
	n.long.Add(-1)
	n.br.Succeeded(t)
}

// ended takes an operation admitAs admitted off the node's count of long
// ones; the caller reports to the breaker.
func (n *node) ended(long bool) {
	if long {
		n.long.Add(-1)
	}
}

// guardChain is a nodeGuard's process hook around one next.
type guardChain struct {
	g    nodeGuard
	next redis.ProcessHook // the rest of go-redis's chain
	// users, with g.user, is the user's hooks around step(false), built
	// for the first command that meets a user hook.
	users atomic.Pointer[wrapped[redis.ProcessHook]]
	// bare, with g.facade, is the guard's step alone (alone), built for
	// the first command the facade's step rides out.
	bare atomic.Pointer[redis.ProcessHook]
}

// unusual is step for every command but the common one: the facade's step,
// when this hook runs it, then the guard's (guarded). A command go-redis
// sends while it sets up a connection is the guard's alone: nothing of the
// facade's applies to it (its replies are go-redis's to judge, and a
// refusal is the caller's command's to ride out), as in Cluster mode, where
// the facade never sees one.
//
//go:noinline
func (ch *guardChain) unusual(ctx context.Context, cmd redis.Cmder, n *node) error {
	f := ch.g.facade
	if f == nil || isHandshake(ctx, cmd) {
		return ch.guarded(ctx, cmd, n, ch.g.nodes.slow.sample(n))
	}
	if done, err := f.before(ctx, cmd, ch.g.tx); done {
		return err
	}
	return ch.answered(ctx, cmd, ch.guarded(ctx, cmd, n, ch.g.nodes.slow.sample(n)))
}

// answered is the facade's step after the guard's, when this hook runs it:
// err, what the guard returned, in the facade's terms, a refusal ridden out
// through the guard again (alone), each attempt admitted afresh.
func (ch *guardChain) answered(ctx context.Context, cmd redis.Cmder, err error) error {
	f := ch.g.facade
	switch {
	case f == nil || err == nil || err == redis.Nil:
		return err // the facade passes both as they are
	case ridesOut(cmd, err):
		return f.failedCmd(ctx, cmd, ch.alone(), err)
	}
	return f.settled(ctx, cmd, err)
}

// alone returns the guard's step without the facade's or the user's hooks:
// what the facade's ride-out sends a command through again.
func (ch *guardChain) alone() redis.ProcessHook {
	if p := ch.bare.Load(); p != nil {
		return *p
	}
	fn := redis.ProcessHook(func(ctx context.Context, cmd redis.Cmder) error {
		n := ch.g.node()
		return ch.guarded(ctx, cmd, n, ch.g.nodes.slow.sample(n))
	})
	ch.bare.CompareAndSwap(nil, &fn)
	return *ch.bare.Load()
}

// refused is what a command gets on the common path while n's breaker is
// open.
//
//go:noinline
func (ch *guardChain) refused(ctx context.Context, cmd redis.Cmder, n *node) error {
	return ch.answered(ctx, cmd, ch.g.fastFail(n))
}

// viaUser runs cmd through the user's hooks, then the guard.
//
//go:noinline
func (ch *guardChain) viaUser(ctx context.Context, cmd redis.Cmder) error {
	w := ch.users.Load()
	if w == nil {
		ch.users.CompareAndSwap(nil, ch.g.user.process(ch.step(false)))
		w = ch.users.Load()
	}
	return w.get()(ctx, cmd)
}

// nextFailed ends a command that next answered with err, not nil: as a
// success for redis.Nil, else as failed does, and then, when this hook runs
// it, as the facade's step does (answered).
//
//go:noinline
func (ch *guardChain) nextFailed(ctx context.Context, cmd redis.Cmder, n *node, t breaker.Ticket, err error) error {
	if err == redis.Nil {
		n.succeeded(t)
		return err
	}
	return ch.answered(ctx, cmd, ch.failed(ctx, cmd, n, t, false, err))
}

// guarded is the guard's step for every command but the common one.
// sampled says the command is timed for slow-node marking.
//
//go:noinline
func (ch *guardChain) guarded(ctx context.Context, cmd redis.Cmder, n *node, sampled bool) error {
	g := &ch.g
	if g.k.closed.Load() {
		// Close outranks the breaker, and a connection's set-up: the
		// operation that needed it ends with ErrClosed too.
		return ErrClosed
	}
	if isHandshake(ctx, cmd) {
		// Setting up a connection: nothing of the facade's applies (its
		// replies are go-redis's to judge, and a refusal is the caller's
		// command's to ride out).
		return g.handshake(ch.next(ctx, cmd), isHello(cmd))
	}
	if g.nodes.topo != nil && isClusterSlots(cmd) {
		if g.subscriptions {
			return g.nodes.topo.answer(ctx, cmd) // nothing is sent: its pool dials nothing
		}
		if n.br.State() == breaker.Open {
			// Never spend a half-open node's single probe, or a full
			// timeout, on a topology call: go-redis asks another node.
			return n.unavailable
		}
		return g.nodes.topo.serve(ctx, cmd, func(ctx context.Context, cmd redis.Cmder) error {
			return ch.admitted(ctx, cmd, n, false)
		})
	}
	return ch.admitted(ctx, cmd, n, sampled)
}

// admitted runs cmd on n past the slow-node limit and the breaker.
func (ch *guardChain) admitted(ctx context.Context, cmd redis.Cmder, n *node, sampled bool) error {
	g := &ch.g
	c, slow := g.k, g.nodes.slow
	if n.slow.Load() && classifyCmd(cmd) == classOrdinary {
		// Blocking commands wait by design and are not limited here.
		if err := slow.admit(ctx, n); err != nil {
			return err
		}
		defer n.slowWaiting.Add(-1)
	}
	long := g.long || classifyCmd(cmd) == classBlocking
	t, err := n.admitAs(long)
	if err != nil {
		return g.fastFail(n)
	}
	var start time.Time
	if sampled {
		start = c.clock.Now()
	}
	err = ch.next(ctx, cmd)
	if err == nil || err == redis.Nil {
		n.succeededAs(t, long)
		if sampled {
			slow.observe(g.nodes, n, cmd, start)
		}
		return err
	}
	return ch.failed(ctx, cmd, n, t, long, err)
}

// failed finishes a command that the chain behind this hook answered with
// err, neither nil nor redis.Nil: a command that failed on a reset
// connection before it could have run is sent again, the breaker is told,
// and the error is typed for the node (callerError). long says how it was
// admitted (admitAs).
//
// A command whose connection the opening breaker cut (connSet.cut) ends
// with ErrNodeUnavailable, or ErrOutcomeUnknown if it may have run and is
// not safe to repeat: the node is known to be down, and nothing sends it
// again there.
//
//go:noinline
func (ch *guardChain) failed(ctx context.Context, cmd redis.Cmder, n *node, t breaker.Ticket, long bool, err error) error {
	g := &ch.g
	c := g.k
	err, onTx := unmarkTx(err)
	cut := wasCut(n, err)
	unrepeatable := !c.closed.Load() && mayHaveRun(ctx, err) && !repeatable(cmd)
	if !cut && !unrepeatable && !cmd.NoRetry() && g.retryReset(ctx, err) {
		err, _ = unmarkTx(ch.next(ctx, cmd))
	}
	n.ended(long)
	n.br.Done(t, g.outcome(n, ctx, err))
	if err == nil || isRedisReply(err) {
		return err
	}
	if isExhaustion(err) && classifyCmd(cmd) == classOrdinary {
		n.noteExhausted(c)
	}
	return g.seal(n.callerError(ctx, cmd, err, cut, unrepeatable), onTx)
}

// seal is err, sealed when it wraps a network's error and what the guard
// returns goes to go-redis's cluster loop, which would send the command
// again on finding one (sealed); the cluster facade unseals it. What a
// Watch transaction's commands return (onTx) goes to the Watch function,
// whose answer Client.Watch seals in its place (sealTx).
func (g *nodeGuard) seal(err error, onTx bool) error {
	if g.nodes.topo == nil || onTx {
		return err
	}
	if ne, ok := err.(*NodeError); ok && ne.cause != nil {
		return sealed{ne}
	}
	return err
}

// ProcessPipelineHook allocates twice: go-redis's AutoPipeliner builds its
// client's hook chain again for every batch it sends.
func (g nodeGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	bc := &batchChain{g: g, next: next}
	return bc.step(g.user != nil)
}

// step is the guard's pipeline hook: with facade, the facade's step and then
// the guard's; outer as for guardChain.step.
//
// go-redis's cluster client sends each node's batch from a goroutine of its
// own, started for the batch, whose stack grows with the frames it passes:
// the path to next is this one small frame, and the rare paths run in
// functions of their own. Not inlined, as guardChain.step.
//
//go:noinline
func (bc *batchChain) step(outer bool) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if outer && bc.g.user.hooks.Load() != nil {
			return bc.viaUser(ctx, cmds)
		}
		n := bc.g.node()
		if bc.unusual(ctx, n, cmds) {
			return bc.guarded(ctx, cmds, n)
		}
		t, err := n.admit()
		if err != nil {
			return bc.refused(ctx, cmds, n)
		}
		if err = bc.next(ctx, cmds); err == nil {
			n.succeeded(t)
			return nil
		}
		return bc.nextFailed(ctx, cmds, n, t, err)
	}
}

// batchChain is a nodeGuard's pipeline hook around one next.
type batchChain struct {
	g     nodeGuard
	next  redis.ProcessPipelineHook
	users atomic.Pointer[wrapped[redis.ProcessPipelineHook]] // as for guardChain
	bare  atomic.Pointer[redis.ProcessPipelineHook]          // as for guardChain
}

// answered is the facade's step after the guard's, when this hook runs it,
// as for guardChain: a single node's nil and redis.Nil pass as they are
// (facade.batchDone).
func (bc *batchChain) answered(ctx context.Context, cmds []redis.Cmder, err error) error {
	f := bc.g.facade
	switch {
	case f == nil || err == nil || err == redis.Nil:
		return err
	case f.batchRidesOut(cmds, err):
		return f.failedBatch(ctx, cmds, bc.alone(), err)
	}
	return f.settledBatch(ctx, cmds, err)
}

// alone returns the guard's pipeline step without the facade's or the
// user's hooks, as for guardChain.
func (bc *batchChain) alone() redis.ProcessPipelineHook {
	if p := bc.bare.Load(); p != nil {
		return *p
	}
	fn := redis.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
		return bc.guard(ctx, cmds, bc.g.node())
	})
	bc.bare.CompareAndSwap(nil, &fn)
	return *bc.bare.Load()
}

// viaUser runs cmds through the user's hooks, then the guard.
//
//go:noinline
func (bc *batchChain) viaUser(ctx context.Context, cmds []redis.Cmder) error {
	w := bc.users.Load()
	if w == nil {
		bc.users.CompareAndSwap(nil, bc.g.user.pipeline(bc.step(false)))
		w = bc.users.Load()
	}
	return w.get()(ctx, cmds)
}

// unusual reports whether cmds, for n, need more than the common path of
// ProcessPipelineHook: a handshake, a closed client, a node marked slow, or
// a batch the facade's step hands to the long budget.
//
//go:noinline
func (bc *batchChain) unusual(ctx context.Context, n *node, cmds []redis.Cmder) bool {
	return (len(cmds) > 0 && isHandshake(ctx, cmds[0])) || bc.g.k.closed.Load() || n.slow.Load() || bc.g.long ||
		bc.g.nodes.sent.pending() || (bc.g.facade != nil && batchIsBlocking(cmds))
}

// nextFailed ends a batch that next answered with err, not nil, as
// batchFailed does, and then, when this hook runs it, as the facade's step
// does (answered).
//
//go:noinline
func (bc *batchChain) nextFailed(ctx context.Context, cmds []redis.Cmder, n *node, t breaker.Ticket, err error) error {
	if err == redis.Nil {
		n.succeeded(t)
		return err
	}
	return bc.answered(ctx, cmds, bc.g.batchFailed(ctx, cmds, bc.next, n, t, false, err))
}

// refused is what a batch gets on the common path while n's breaker is
// open.
//
//go:noinline
func (bc *batchChain) refused(ctx context.Context, cmds []redis.Cmder, n *node) error {
	return bc.answered(ctx, cmds, bc.g.refuseOpen(n, cmds))
}

// guarded is ProcessPipelineHook for the batches unusual picks out: the
// facade's step, when this hook runs it, then the guard's (guard). A
// connection's set-up is the guard's alone, as for guardChain.unusual.
//
//go:noinline
func (bc *batchChain) guarded(ctx context.Context, cmds []redis.Cmder, n *node) error {
	f := bc.g.facade
	if f == nil || (len(cmds) > 0 && isHandshake(ctx, cmds[0])) {
		return bc.guard(ctx, cmds, n)
	}
	if done, err := f.beforeBatch(ctx, cmds, bc.g.tx); done {
		return err
	}
	return bc.answered(ctx, cmds, bc.guard(ctx, cmds, n))
}

// guard is the guard's pipeline step for the batches unusual picks out.
//
//go:noinline
func (bc *batchChain) guard(ctx context.Context, cmds []redis.Cmder, n *node) error {
	g := &bc.g
	if g.k.closed.Load() {
		return failBatch(cmds, ErrClosed) // Close outranks the breaker and a set-up, as in ProcessHook
	}
	if len(cmds) > 0 && isHandshake(ctx, cmds[0]) {
		return g.handshake(bc.next(ctx, cmds), false) // as in guardChain.guarded
	}
	if g.nodes.sent.pending() {
		// go-redis sends a failed batch again whole: not the commands of it
		// that may have run and are not safe to repeat (sentOnce).
		var left bool
		if cmds, left = g.nodes.sent.unsent(cmds); left && len(cmds) == 0 {
			return nil // each keeps what it got; go-redis takes nil as served
		}
	}
	if n.slow.Load() {
		admitted, err := g.admitBatch(ctx, n, cmds)
		if err != nil {
			return failBatch(cmds, err)
		}
		if admitted {
			defer n.slowWaiting.Add(-1)
		}
	}
	long := g.long || batchIsBlocking(cmds)
	t, err := n.admitAs(long)
	if err != nil {
		return g.refuseOpen(n, cmds)
	}
	err = bc.next(ctx, cmds)
	if err == nil || err == redis.Nil {
		n.succeededAs(t, long)
		return err
	}
	return g.batchFailed(ctx, cmds, bc.next, n, t, long, err)
}

// admitBatch waits for n, marked slow, to take cmds, unless they block
// (blocking commands wait by design and are not limited), and reports
// whether they were admitted and so count as waiting.
//
//go:noinline
func (g *nodeGuard) admitBatch(ctx context.Context, n *node, cmds []redis.Cmder) (bool, error) {
	if batchIsBlocking(cmds) {
		return false, nil
	}
	if err := g.nodes.slow.admit(ctx, n); err != nil {
		return false, err
	}
	return true, nil
}

// refuseOpen fails cmds, for n whose breaker is open.
//
//go:noinline
func (g *nodeGuard) refuseOpen(n *node, cmds []redis.Cmder) error {
	return failBatch(cmds, g.fastFail(n))
}

// failBatch fails every command of cmds with err, and returns it.
func failBatch(cmds []redis.Cmder, err error) error {
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
	return err
}

// batchFailed finishes a batch that next answered with err, neither nil
// nor redis.Nil: a batch that failed before anything was sent on a reset
// connection is sent again, the breaker is told, and every command's error
// is typed for the node (callerError).
//
//go:noinline
func (g *nodeGuard) batchFailed(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, n *node, t breaker.Ticket, long bool, err error) error {
	err, onTx := unmarkTx(err)
	cut := wasCut(n, err)
	// go-redis's cluster client sends a failed pipeline batch again by
	// itself, without the commands that may have run (sentOnce); for any
	// other batch (a transaction, an ASK redirect's, every batch outside
	// Cluster mode) the guard resends one that met a reset, if all of it is
	// safe to. A Watch transaction (onTx) is not resent: its WATCH went
	// with the connection, and the Watch function's caller retries it.
	resend := g.nodes.topo == nil || !clusterResends(cmds)
	if !cut && g.retryReset(ctx, err) && (isUnansweredSetup(err) || (resend && !onTx && resendable(cmds))) {
		err, _ = unmarkTx(next(ctx, cmds)) // go-redis re-reads every reply, clearing the first attempt's errors
	}
	n.ended(long)
	n.br.Done(t, g.outcome(n, ctx, err))
	if g.nodes.topo != nil {
		g.nodes.sent.note(ctx, cmds, err, g.k.closed.Load())
	}
	if batchAnswered(err) {
		return err
	}
	if isExhaustion(err) && !batchIsBlocking(cmds) {
		n.noteExhausted(g.k)
	}
	closed := g.k.closed.Load()
	var unknown error
	for _, cmd := range cmds {
		// A pool timeout fails the whole batch before anything is sent;
		// the nil replies of a pipeline of GETs skip the check.
		cerr := cmd.Err()
		if cerr == nil || cerr == redis.Nil || errors.Is(cerr, ErrOutcomeUnknown) {
			continue
		}
		if isRedisReply(cerr) {
			if !didNotRun(cerr) || repeatable(cmd) || !ranOrMayHave(ctx, cerr, err, closed) {
				continue
			}
			// An earlier attempt's redirect, on a command sent again
			// (ranOrMayHave): its outcome is this attempt's failure's.
			cerr = err
		}
		cerr = g.seal(n.callerError(ctx, cmd, cerr, cut, !closed && mayHaveRun(ctx, cerr) && !repeatable(cmd)), onTx)
		cmd.SetErr(cerr)
		if unknown == nil && errors.Is(cerr, ErrOutcomeUnknown) {
			unknown = cerr
		}
	}
	if unknown != nil {
		// What the caller of a batch of one command (go-redis's ASK
		// redirect) gets, and what must stop go-redis's retry loops.
		return unknown
	}
	return g.seal(n.callerError(ctx, nil, err, cut, false), onTx)
}

// wasCut reports whether err is what a command got whose connection to n
// was cut: n's breaker is open, and the connection was closed under it.
func wasCut(n *node, err error) bool {
	return n.br.State() == breaker.Open && isConnReset(err)
}

// batchAnswered reports whether a node client's batch that returned err
// holds nothing but the server's replies, so that no command's error needs
// translating. A node client (go-redis's baseClient) returns a network or
// pool failure as soon as it meets one, and stamps it on every command it
// had not read; it returns its first command's reply (redis.Nil, an error
// reply) only once every reply has been read. The cluster client, which
// returns the first failed command's error whatever came after it, does not
// qualify.
func batchAnswered(err error) bool {
	return err == nil || err == redis.Nil || isRedisReply(err)
}

// outcome is outcome(ctx, err) for n, except that on a Sentinel client a
// failed dial to another address than n's is not n's failure.
func (g *nodeGuard) outcome(n *node, ctx context.Context, err error) breaker.Outcome {
	o := outcome(ctx, err)
	if o == breaker.Failure && g.follow != nil && g.follow.dialedElsewhere(n, err) {
		return breaker.Neutral
	}
	if o == breaker.Failure && isTimeout(err) && n.maint.active(g.k.clock.Now()) {
		// The node announced a maintenance, and go-redis waited the
		// relaxed timeout for it.
		return breaker.Neutral
	}
	return o
}

// handshake is the guard's answer to a command go-redis sent while setting
// up a fresh connection: a subscription connection's failure unmarked, any
// other's marked (handshake).
func (g *nodeGuard) handshake(err error, first bool) error {
	if g.subscriptions {
		return err
	}
	return handshake(err, first)
}

// handshake marks the network failure of a command go-redis sent while
// setting up a fresh connection (setup.go); first says the command was the
// HELLO that opens the handshake, before which the server has answered
// nothing.
func handshake(err error, first bool) error {
	if refused, ok := refusal(err); ok {
		return refused // the guard's own verdict on the dial (nodeGuard.DialHook)
	}
	if err != nil && isNetworkError(err) {
		return setupFailure(err, !first)
	}
	return err
}

// isNetworkError reports whether err is the network's: a net.Error
// (timeouts included) or a dropped connection.
func isNetworkError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || isConnReset(err)
}

// fastFail is what a command gets while the node's breaker is open.
func (g *nodeGuard) fastFail(n *node) error {
	g.nodes.refused(n)
	if topo := g.nodes.topo; topo != nil {
		topo.trigger() // rate-limited; keeps looking for a new owner while requests arrive
	}
	return n.unavailable
}

// isExhaustion reports whether an operation found no connection in the
// node's pool: go-redis's pool timeout, which only the guard translates
// (callerError), in every mode.
func isExhaustion(err error) bool { return errors.Is(err, redis.ErrPoolTimeout) }

// noteExhausted counts and reports an ordinary operation that found the
// node's pool exhausted: once per operation, however many commands a
// pipeline held. Callers leave out long operations, whose budget the
// admission code counts and reports itself; their classification is only
// repeated here on this error path.
func (n *node) noteExhausted(c *core) {
	n.exhaustions.Add(1)
	c.emitLimited(Event{Kind: EventPoolExhausted, Addr: n.addr, Budget: BudgetOrdinary}, &n.exhaustLog)
}

// outcome decides what a command's result says about the node.
//
// Only a node that cannot be reached or does not answer in time is failing.
// Error replies (redis.Nil, WRONGTYPE, OOM, READONLY, MOVED...) are answers.
// The caller's own cancellation or deadline says nothing about the node, nor
// does a full pool. A connection reset by a healthy server (CLIENT KILL, an
// idle timeout) is neutral too: go-redis retries it once on the same node,
// and if the node is really gone that retry's dial fails and counts. A
// fresh connection that fails before the server has answered anything on
// it fails the node, reset or not (setup.go).
func outcome(ctx context.Context, err error) breaker.Outcome {
	switch {
	case err == nil || err == redis.Nil:
		return breaker.Success
	case isRedisReply(err), errors.Is(err, ErrNotServing):
		return breaker.Success
	case contextDone(ctx) != nil:
		return breaker.Neutral
	case errors.As(err, new(*unknownMasterError)):
		return breaker.Neutral // the sentinels answered; no node was tried
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, ErrClosed), errors.Is(err, ErrPoolExhausted), errors.Is(err, ErrNodeUnavailable):
		return breaker.Neutral
	case isUnansweredSetup(err):
		return breaker.Failure
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return breaker.Failure
	}
	if isTimeout(err) {
		return breaker.Failure
	}
	if isConnReset(err) {
		return breaker.Neutral
	}
	return breaker.Failure
}

// retryReset reports whether a failed call should be sent once more to the
// same node: its connection was reset by the server (CLIENT KILL, an idle
// timeout, a restart), and the caller still waits. go-redis's own retries
// are off (see build.go), and the errors the guard hands go-redis's cluster
// loop are not ones it retries (callerError), so this is the one retry. It
// also covers a fresh connection reset before the server answered
// anything: the breaker counts that as a failure (setup.go), and must not
// count one that a CLIENT KILL caught in the middle of a handshake, so it
// hears only of the retry, which such a kill rarely catches too.
//
// This is narrower than go-redis's MaxRetries on purpose: go-redis would also
// retry read timeouts, doubling how long a hung server holds each caller
// before its breaker hears of it, and pool timeouts, which must surface as
// ErrPoolExhausted at once.
func (g *nodeGuard) retryReset(ctx context.Context, err error) bool {
	return !g.k.closed.Load() && !isRedisReply(err) && isConnReset(err) && contextDone(ctx) == nil
}

// isConnReset reports whether err is an established connection dropped by the
// peer, as opposed to a peer that cannot be reached.
func isConnReset(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, net.ErrClosed)
}

// breakerEvent is the event that reports a transition to state to.
func breakerEvent(to breaker.State) EventKind {
	switch to {
	case breaker.Open:
		return EventBreakerOpened
	case breaker.HalfOpen:
		return EventBreakerHalfOpen
	}
	return EventBreakerClosed
}
