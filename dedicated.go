package redisguard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// dedicated is one long connection, kept across calls so that its client id
// is learned once. It is the only connection of a go-redis client of its
// own, whose dial it watches: go-redis offers no way to close a pooled
// connection under a read in progress, and a cancelled call that CLIENT
// UNBLOCK cannot end must be cut off at once (see sever).
//
// Its fields but the socket are fixed at creation; the call that took it
// from the idle list owns it until put or discard.
type dedicated struct {
	control *redis.Client // the node's long client: CLIENT UNBLOCK goes through its pool
	sh      *shell        // this connection's client, one connection in its pool
	conn    *redis.Conn   // holds that connection for the dedicated's whole life
	id      int64         // the connection's client id; 0 if the server gives none (Redis numbers clients from 1)
	key     string        // node address: the idle list it returns to
	dialled string        // the endpoint it dials when its node has moved (dedicated_moving.go); "" for the node's own
	opened  time.Time     // by the client's clock

	mu        sync.Mutex
	sock      *socket                 // guarded by mu: the socket under conn, once dialled
	severed   bool                    // guarded by mu
	move      context.CancelCauseFunc // guarded by mu: moves the call in progress; nil between calls
	moveAt    time.Time               // guarded by mu: when the call on d is to move; zero if never
	moveTimer *time.Timer             // guarded by mu: moves the call in progress at moveAt
}

// shell is the go-redis client under a dedicated connection, with one
// connection in its pool, dialled through socketHook for its current owner.
// A shell whose connection was set up outlives that connection: it carries
// the next dedicated connection to its node, so that Instrument's
// extensions, which may keep state for each go-redis client they are given
// (a metrics callback), run once per shell rather than once per connection.
// There are never more shells for a node than dedicated connections to it
// at once.
type shell struct {
	client *redis.Client
	owner  atomic.Pointer[dedicated] // the dedicated connection it carries
	gen    uint64                    // admission's gen when built: an older shell is not reused
}

// onDedicated runs do, which sends cmds, on a dedicated connection to node,
// and once more on a fresh one if the connection was reset under the call
// (an idle one that died meanwhile, a server idle timeout, CLIENT KILL, a
// move that cut it off), as the node guard's reset retry decides for an
// ordinary command: provided that cmds may be sent again, or cannot have run
// (see resendable and mayHaveRun). The guard on the dedicated connection
// cannot send it again itself: the connection is gone.
func (a *admission) onDedicated(ctx context.Context, node *redis.Client, key string, cmds []redis.Cmder,
	do func(context.Context, *redis.Conn) error) error {
	moves := 0
	start := time.Now()
	resent := false
	for {
		d, _, err := a.take(ctx, node, key)
		if err != nil {
			return err
		}
		cancelled, moved, err := a.run(ctx, d, cmds, do)
		switch {
		case moved:
			// Moved, not cancelled: the caller still waits (see
			// dedicated_moving.go).
			a.discard(d)
			again, result := movedCall(cmds[0], err, moves)
			if again {
				moves++
				shortenWait(cmds[0].Args(), time.Since(start))
				continue
			}
			err = result
		case cancelled:
			// CLIENT UNBLOCK was sent for this call, or its socket was
			// closed (see run). -UNBLOCKED does not prove the connection
			// clean: a command the server had postponed (a write pause)
			// answers -UNBLOCKED on Redis 7.0 and still runs when the pause
			// ends, with a second reply. Closed, the connection is gone for
			// the server too, and so is the postponed command.
			a.discard(d)
		default:
			a.put(d, reusable(err)) // d may serve another call from here on
		}
		if !cancelled && !resent && resetResendable(ctx, cmds, err) {
			resent = true
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

// resetResendable reports whether cmds, which failed with err on a dedicated
// connection, are sent again on a fresh one: the connection was reset, and
// they may be repeated or cannot have run. err is what the connection's
// guard returned, typed for its node (callerError): the rule reads the
// network's error under it.
func resetResendable(ctx context.Context, cmds []redis.Cmder, err error) bool {
	cause := unseal(err)
	if ne, ok := cause.(*NodeError); ok && ne.cause != nil {
		cause = ne.cause
	}
	return isConnReset(cause) && !errors.Is(err, ErrClosed) && contextDone(ctx) == nil &&
		(resendable(cmds) || !mayHaveRun(ctx, cause))
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
	var stale []*dedicated
	for list := a.idle[key]; len(list) > 0; list = a.idle[key] {
		d := list[len(list)-1]
		list[len(list)-1] = nil
		a.idle[key] = list[:len(list)-1]
		if a.staleLocked(d) {
			stale = append(stale, d)
			continue
		}
		a.mu.Unlock()
		a.discardAll(stale)
		return d, true, nil
	}
	a.mu.Unlock()
	a.discardAll(stale)
	d, err = a.open(ctx, node, key)
	return d, false, err
}

// open dials a dedicated connection to node, with node's options but for
// its pool of one and its reads, which have no timeout of their own: the
// socket caps their deadlines instead (see socket), at ReadTimeout after the
// dial for the set-up, and for each call at the deadline run sets.
//
// The first command claims the connection and learns the id the server
// knows it by (connID). A server or proxy that gives none (miniredis, some
// managed proxies) answers with an error reply; a cancelled call is then
// ended by closing its connection. Any other failure is the connection's
// set-up failing: the caller's command was not sent.
func (a *admission) open(ctx context.Context, node *redis.Client, key string) (*dedicated, error) {
	d := &dedicated{control: node, key: key}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if free := a.shells[key]; len(free) > 0 {
		d.sh = free[len(free)-1]
		free[len(free)-1] = nil
		a.shells[key] = free[:len(free)-1]
	}
	a.live[d] = struct{}{}
	d.dialled, d.opened = a.endpointLocked(key), a.k.clock.Now()
	due, moves := a.dueLocked(d)
	a.mu.Unlock()
	if moves {
		d.moveBy(due) // its node moves again, to the same endpoint, later
	}
	if d.sh == nil {
		sh := &shell{gen: a.gen.Load()}
		sh.client = newGoRedis(clientSpec{
			kind: clientDedicated, k: a.k, base: node.Options(), hooks: a.hooks,
			guard: a.guard(node.Options().Addr), socket: socketHook{sh: sh, timeout: a.k.cfg.ReadTimeout},
		}).(*redis.Client)
		a.hearMoving(sh)
		d.sh = sh
	}
	d.sh.owner.Store(d)
	// Closing an ephemeral Conn closes its connection rather than pooling it.
	d.conn = d.sh.client.EphemeralConn()

	stop := context.AfterFunc(ctx, d.sever) // cancelled while the server does not answer
	id, err := d.connID(withCaller(ctx, ctx))
	if !stop() {
		// The cancellation came during the set-up and is severing d,
		// perhaps just as its id was answered: the call must not be sent
		// on a connection being closed under it, where a reply (an
		// element) could be lost. Nothing of the call was sent.
		a.discard(d)
		return nil, ctx.Err()
	}
	if err != nil && !isRedisReply(err) {
		a.discard(d)
		return nil, setupFailure(err, d.answered())
	}
	d.id = id
	return d, nil
}

// connID asks the server for d's client id with a bare HELLO, which every
// user may send (hello.go), rather than CLIENT ID, which an application's
// user is often denied; CLIENT ID only when the server cannot answer HELLO
// so (older than Redis 6.2). An error reply means the server gives no id.
func (d *dedicated) connID(ctx context.Context) (int64, error) {
	hello, err := askHello(ctx, d.conn.Process)
	switch {
	case err == nil && hello.id > 0:
		return hello.id, nil
	case err != nil && !isRedisReply(err):
		return 0, err
	}
	return d.conn.ClientID(ctx).Result()
}

// close ends d and its shell for good.
func (d *dedicated) close() {
	d.sever()
	_ = d.conn.Close()
	_ = d.sh.client.Close()
}

// discard closes d for good, and keeps its shell for the next dedicated
// connection to the node if the shell's connection was set up: a shell
// whose dial failed would refuse to dial again until go-redis's pool has
// redialled in the background.
func (a *admission) discard(d *dedicated) {
	d.sever()
	_ = d.conn.Close()
	a.mu.Lock()
	delete(a.live, d)
	if !a.closed && d.answered() && d.sh.gen == a.gen.Load() {
		a.shells[d.key] = append(a.shells[d.key], d.sh)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	_ = d.sh.client.Close()
}

// put keeps d for the next call when reuse is true, and closes it
// otherwise.
func (a *admission) put(d *dedicated, reuse bool) {
	if reuse {
		a.mu.Lock()
		if !a.closed && d.sh.gen == a.gen.Load() && !a.staleLocked(d) {
			a.idle[d.key] = append(a.idle[d.key], d)
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
	}
	a.discard(d)
}

// run executes do, which sends cmds, on d so that cancelling ctx ends the
// call without losing data and without leaving a reply behind for the next
// caller, and so that the call's replies are awaited as long as its
// blocking commands may rightly wait (see readDeadline).
//
// go-redis reads a reply until the socket deadline it derives from ctx and
// does not watch for cancellation. Were the socket deadline to fire first,
// an element popped at that instant would be lost with the abandoned
// connection. So the read runs under a context without ctx's cancellation,
// and when ctx ends, CLIENT UNBLOCK ... ERROR on another connection makes
// the server end the call before it pops anything (see interrupt). The
// reply (-UNBLOCKED, or an element that won the race) is then read as
// usual. Where UNBLOCK cannot end the call promptly, interrupt closes the
// connection instead. cancelled reports whether either happened; the
// caller maps the result and discards the connection.
//
// A single-command call is ended the same way when its node announces a
// move (dedicated_moving.go); moved reports that, with ctx still running.
func (a *admission) run(ctx context.Context, d *dedicated, cmds []redis.Cmder, do func(context.Context, *redis.Conn) error) (cancelled, moved bool, err error) {
	runCtx := withCaller(context.WithoutCancel(ctx), ctx)
	deadline, ok := a.readDeadline(cmds)
	if mine, has := ctx.Deadline(); has && (!ok || mine.Add(unblockGrace).Before(deadline)) {
		deadline = mine.Add(unblockGrace) // a backstop: interrupt ends the call sooner
	}
	d.readsBy(deadline)
	callCtx := ctx
	if len(cmds) == 1 {
		var move context.CancelCauseFunc
		callCtx, move = context.WithCancelCause(ctx)
		defer move(nil)
		d.following(move)
		defer d.following(nil)
	}
	if callCtx.Done() == nil {
		return false, false, do(runCtx, d.conn)
	}
	finished := make(chan struct{})
	stop := context.AfterFunc(callCtx, func() {
		// Refused once Close has begun: it is cutting the call short anyway.
		a.bg.Go(func(ctx context.Context) { a.interrupt(ctx, d, finished) })
	})
	err = do(runCtx, d.conn)
	close(finished)
	if stop() {
		return false, false, err
	}
	if ctx.Err() == nil && errors.Is(context.Cause(callCtx), errMoved) {
		return false, true, err
	}
	return true, false, err
}

// readDeadline is when the replies of cmds, sent now, are overdue: their
// blocking commands' own timeouts (batchWait) plus ReadTimeout; the zero
// time, and ok false, when one of them may wait forever. Waiting until then
// is not failing; a server that has not answered by then is failing.
func (a *admission) readDeadline(cmds []redis.Cmder) (deadline time.Time, ok bool) {
	wait, forever := batchWait(cmds)
	if forever {
		return time.Time{}, false
	}
	return time.Now().Add(wait + a.k.cfg.ReadTimeout), true
}

// unblockQuestion is CLIENT UNBLOCK, as a refusal is logged.
var unblockQuestion = question{"client|unblock", "a cancelled blocking call is ended by closing its connection"}

// isUnblocked reports whether err is the -UNBLOCKED reply that CLIENT
// UNBLOCK ... ERROR gives the command it ended.
func isUnblocked(err error) bool {
	return isRedisReply(err) && strings.HasPrefix(err.Error(), "UNBLOCKED")
}

// reusable reports whether a dedicated connection is clean after a call
// that ended with err: a reply, even an error reply, was read in full. Not
// after the reply a master that becomes a replica ends its blocking calls
// with (isDemotedUnblock): the next call sent on that connection failed
// with EOF, so the call sent again after it dials afresh.
func reusable(err error) bool {
	return err == nil || err == redis.Nil || (isRedisReply(err) && !isDemotedUnblock(err))
}

// interrupt ends the call on d whose context was cancelled, and returns
// once finished is closed, the call is cut off, or ctx (the admission's
// own, done at Close) ends. The call must end within
// unblockGrace of the cancellation, whatever the server's state or the
// user's permissions.
//
// It sends CLIENT UNBLOCK <id> ERROR until the call returns. ERROR, not
// TIMEOUT: a command the server has postponed (a write pause during CLUSTER
// FAILOVER, CLIENT PAUSE WRITE) is blocked without a timeout handler, and
// UNBLOCK ... TIMEOUT on it crashes Redis before 8.2 and Valkey before 8.1.2
// ("Unknown btype in replyToBlockedClientTimedOut"; redis#14164,
// valkey#2117). ERROR ends a blocked BLPOP without popping anything, just
// as TIMEOUT does, with an -UNBLOCKED reply that run's caller maps to
// ctx.Err(); on a postponed command it answers -UNBLOCKED to a command that
// never ran, which is just as safe. UNBLOCK answers 0 while the command has
// not reached the server yet, so it is retried with a back-off that grows
// from 1ms to unblockBackoffMax (a call that reaches its server late is
// ended at most that long after it does); a
// batch may also hold several blocking commands in turn. The connection is
// not closed while UNBLOCK works: a call that is not blocked may have its
// reply on the way, and closing would lose it.
//
// The connection is closed at once (sever) when UNBLOCK cannot be used: the
// server gave no client id, or refused UNBLOCK with an error reply (a user
// without the permission, ACL -@dangerous; a proxy without the command),
// which is logged once and remembered for every later call rather than
// asked again (admission.unblock). It is
// closed too when UNBLOCK does not answer within unblockGrace (a hung
// server), or has not ended the call within unblockGrace of its
// cancellation (a command UNBLOCK cannot end). Closed, a BLPOP that has not
// popped yet never will; one popped at that very instant is lost with the
// connection, the price of returning at all.
//
// Real time paces the loop: this is network back-off, not logic under test.
func (a *admission) interrupt(ctx context.Context, d *dedicated, finished <-chan struct{}) {
	if d.id == 0 || a.unblock.refused() {
		d.sever()
		return
	}
	grace := unblockGrace
	if a.down != nil && a.down(d.key) != nil {
		// A node whose breaker is open has stopped answering: the UNBLOCK
		// gets a short chance (a slow server still answers it, and no
		// element is lost), then the connection is closed, so the call keeps
		// its deadline. A hung server, when it resumes, finds the connection
		// closed before it can serve the call.
		grace = downUnblockGrace
	}
	control := a.controlFor(d)
	giveUp := time.Now().Add(grace)
	wait := time.Millisecond
	for {
		askCtx, cancel := context.WithDeadline(ctx, giveUp)
		cmd := ownCmd{redis.NewCmd(askCtx, "client", "unblock", d.id, "error")}
		_ = control.Process(askCtx, cmd)
		n, err := cmd.Int64()
		cancel()
		switch {
		case isRedisReply(err):
			a.unblock.refuse(a.k, unblockQuestion, control.Options().Addr, err)
			d.sever()
			return
		case err != nil && isConnReset(err) && !errors.Is(err, ErrClosed) && time.Now().Before(giveUp):
			// The control connection, not the call's, was dropped: ask
			// again on another. Cutting the call off instead would lose an
			// element whose reply is on its way.
		case err != nil:
			d.sever() // no answer in time, or the client is closing
			return
		case n == 1:
			wait = time.Millisecond // the reply is coming; the next command may block too
		}
		t := time.NewTimer(min(wait, time.Until(giveUp)))
		select {
		case <-finished:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(giveUp) {
			d.sever()
			return
		}
		wait = min(2*wait, unblockBackoffMax)
	}
}

// unblockBackoffMax bounds the wait between two CLIENT UNBLOCKs of one
// cancelled call: at most unblockGrace/unblockBackoffMax (50) of them for a
// call that never blocks.
const unblockBackoffMax = 20 * time.Millisecond
