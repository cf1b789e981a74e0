package redisguard

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// onDedicated runs do, which sends cmds, on a dedicated connection to node,
// and once more on a fresh one if an idle connection turns out to have died
// meanwhile (a server idle timeout, CLIENT KILL), as go-redis would retry a
// pooled one: provided that cmds may be sent again, or cannot have run (see
// resendable and mayHaveRun), as the node guard's reset retry decides.
func (a *admission) onDedicated(ctx context.Context, node *redis.Client, key string, cmds []redis.Cmder,
	do func(context.Context, *redis.Conn) error) error {
	for attempt := 0; ; attempt++ {
		d, reused, err := a.take(ctx, node, key)
		if err != nil {
			return err
		}
		cancelled, err := a.run(ctx, d, do)
		if cancelled {
			// CLIENT UNBLOCK was sent for this call (see run). If the server
			// answered, it answers the kill too: kill before returning, so
			// the held command is dropped before anything else can happen.
			a.discard(d, reusable(err))
		} else {
			a.put(d, reusable(err)) // d may serve another call from here on
		}
		if !cancelled && reused && attempt == 0 && isConnReset(err) && !errors.Is(err, ErrClosed) &&
			(resendable(cmds) || !mayHaveRun(ctx, err)) {
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

// discard ends d for good: CLIENT KILL, then the Conn is closed. Closing a
// go-redis Conn alone hands its TCP connection back to the node client's
// pool, CLIENT ID and all, where the next call (or a late CLIENT UNBLOCK
// meant for this one) would find it, and where a command the server still
// holds postponed on it could answer later. Killed, it is dead: the pool's
// health check drops it, and the server drops the postponed command.
//
// With answering true (the server has just replied on d) the kill is sent
// before discard returns, bounded by discardWait; otherwise, or if that
// runs out, it goes on in the background, owned by Close, so that a
// cancelled caller never waits on a hung server.
func (a *admission) discard(d *dedicated, answering bool) {
	kill := func(wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return d.node.ClientKillByFilter(ctx, "ID", strconv.FormatInt(d.id, 10)).Err()
	}
	if answering {
		if err := kill(discardWait); err == nil || isRedisReply(err) {
			_ = d.conn.Close()
			return
		}
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = d.conn.Close()
		return
	}
	a.loops.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.loops.Done()
		defer d.conn.Close()
		_ = kill(unblockGrace)
	}()
}

// discardWait bounds the kill a cancelled caller waits for: well inside the
// 100ms by which a call may outlive its context.
const discardWait = 50 * time.Millisecond

// put keeps d for the next call when reuse is true, and closes it
// otherwise.
func (a *admission) put(d *dedicated, reuse bool) {
	if reuse {
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
// the race) is then read as usual. cancelled reports whether that happened;
// the caller maps the result and discards the connection: -UNBLOCKED does
// not prove it clean. On a command the server had postponed (a write pause),
// Redis 7.0 answers -UNBLOCKED and still keeps the command, to run it when
// the pause ends, with a second reply; killing the connection makes the
// server drop the command instead (found by the chaos soak, see
// TestCancelledPostponedBlockingCallLeavesNoReplyBehind).
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
	stop := context.AfterFunc(ctx, func() {
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
	// The connection is thrown away, so it need not wait for an unblock
	// loop stuck on a hung server; Close waits for it instead.
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
