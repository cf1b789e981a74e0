package redisguard

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// facade is what every command of the Client's passes at the client level:
// it refuses work after Close, hands long commands to the long budget, rides
// out the replies that say a server cannot serve now, and translates
// go-redis's errors into redisguard's. It holds what those steps read and
// nothing of the Client's.
type facade struct {
	k     *core
	adm   *admission // the long budget
	ride  *rideOut   // waits out the replies that say a server cannot serve now
	nodes *nodeSet   // the node guards' record of unsafe commands sent, and the nodes by address
	topo  *topology  // Cluster mode; nil otherwise
}

// facadeHook is the facade's step as a hook of its own: it refuses work
// after Close, sends long commands to the long budget and translates
// go-redis's errors into redisguard's. Per-node concerns (breakers) live in
// nodeGuard, which runs inside it in every mode: in Cluster mode on each node
// client, below this hook on the cluster client; in Standalone and Sentinel
// mode on the one client, where the guard runs the facade's step before its
// own in one frame (nodeGuard.facade). So a long command reaches the long
// budget before any guard admits it, and the long client's guards admit and
// score it (admission.go).
type facadeHook struct{ f *facade }

func (h facadeHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.f.k.closed.Load() {
			return nil, ErrClosed
		}
		return next(ctx, network, addr)
	}
}

// ProcessHook is the Cluster client's: a plain command (plainCommand), the
// common one, goes on from the hook's own frame, as in the node guard.
func (h facadeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	f := h.f
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.k.closed.Load() || !plainCommand(cmd.Args()) {
			return f.process(ctx, cmd, next, false) // a Tx runs on a node client, below
		}
		return f.answered(ctx, cmd, next, next(ctx, cmd))
	}
}

// process is the facade's step for cmd, around next: it refuses cmd after
// Close, hands a long command to the long budget (before), and translates
// what next answered (answered). onTx says that cmd is sent on a Watch
// transaction's Tx (nodeGuard.tx).
func (f *facade) process(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, onTx bool) error {
	if done, err := f.before(ctx, cmd, onTx); done {
		return err
	}
	return f.answered(ctx, cmd, next, next(ctx, cmd))
}

// before is the facade's step before next: done says cmd ended here, with
// err: refused after Close, or a long command run on the long budget, whose
// own guards admit it; an ordinary command goes on.
func (f *facade) before(ctx context.Context, cmd redis.Cmder, onTx bool) (done bool, err error) {
	if f.k.closed.Load() {
		return true, ErrClosed
	}
	// One classification per command; ordinary ones go straight on.
	if class := classifyCmd(cmd); class != classOrdinary {
		return true, f.translate(ctx, f.long(ctx, cmd, class, onTx))
	}
	return false, nil
}

// long runs cmd, a blocking or holding command, on the long budget. A
// reply that says the server cannot serve it now (it did not run) is
// ridden out as an ordinary command's is (failedCmd), unless cmd is marked
// NoRetry; each time it is sent again, its own timeout is shortened by the
// time spent since it was last sent, so that it waits no longer in all
// than its caller asked.
//
//go:noinline
func (f *facade) long(ctx context.Context, cmd redis.Cmder, class cmdClass, onTx bool) error {
	sent := f.k.clock.Now()
	err := f.adm.process(ctx, cmd, class, onTx)
	if !notServing(err) || cmd.NoRetry() {
		return err
	}
	return f.ride.process(ctx, err, func(ctx context.Context) error {
		now := f.k.clock.Now()
		shortenWait(cmd.Args(), now.Sub(sent))
		sent = now
		return f.adm.process(ctx, cmd, class, onTx)
	})
}

// answered returns err, what next answered an ordinary command, in
// redisguard's terms.
func (f *facade) answered(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, err error) error {
	if err == nil {
		return nil
	}
	return f.failedCmd(ctx, cmd, next, err)
}

// failedCmd is answered for a command that failed: a reply that says the
// server cannot serve it now is ridden out (rideOut), unless the command is
// marked NoRetry (go-redis's per-command switch; redisguard's health
// checks), and what remains is translated.
//
//go:noinline
func (f *facade) failedCmd(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook, err error) error {
	if ridesOut(cmd, err) {
		err = f.ride.process(ctx, err, func(ctx context.Context) error { return next(ctx, cmd) })
	}
	return f.settled(ctx, cmd, err)
}

// ridesOut reports whether failedCmd sends cmd, which failed with err,
// again: a caller that builds next only for that asks first.
func ridesOut(cmd redis.Cmder, err error) bool { return notServing(err) && !cmd.NoRetry() }

// settled is failedCmd once nothing is left to ride out: err, translated.
func (f *facade) settled(ctx context.Context, cmd redis.Cmder, err error) error {
	f.nodes.sent.forget(cmd) // go-redis's attempts have ended
	if f.topo != nil {
		return f.leftover(ctx, cmd, f.translate(ctx, err))
	}
	return f.translate(ctx, err)
}

func (h facadeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	f := h.f
	return func(ctx context.Context, cmds []redis.Cmder) error { return f.processBatch(ctx, cmds, next, false) }
}

// processBatch is process for a batch. A batch after Close, or one that
// blocks, and a failed one run in functions of their own (see
// nodeGuard.ProcessHook).
func (f *facade) processBatch(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, onTx bool) error {
	if done, err := f.beforeBatch(ctx, cmds, onTx); done {
		return err
	}
	return f.batchDone(ctx, cmds, next, next(ctx, cmds))
}

// beforeBatch is before for a batch: one after Close, or one that blocks,
// ends here (unusualBatch).
func (f *facade) beforeBatch(ctx context.Context, cmds []redis.Cmder, onTx bool) (done bool, err error) {
	if f.k.closed.Load() || batchIsBlocking(cmds) {
		return true, f.unusualBatch(ctx, cmds, onTx)
	}
	return false, nil
}

// batchDone returns err, what next answered a batch of ordinary commands,
// in redisguard's terms.
//
// In Cluster mode err is the first command's error, of any node, that is
// not nil, and failedBatch looks for refusals in every command: one node's
// command may fail on its connection while another's is refused. A single
// node's batch shows a refusal that needs riding out in err: it returns its
// first command's reply, and LOADING and MASTERDOWN answer every command
// alike. (READONLY answers only the writes: a pipeline whose first command
// is a read keeps its writes' READONLY.)
func (f *facade) batchDone(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, err error) error {
	if (err == nil || (err == redis.Nil && f.topo == nil)) && !f.nodes.sent.pending() {
		return err
	}
	return f.failedBatch(ctx, cmds, next, err)
}

// failedBatch is batchDone for a batch that failed: its commands refused
// with a reply that says the server cannot serve them now are ridden out
// (rideOut.batch), and what remains is translated. In Cluster mode every
// failed batch is searched for them, whatever failed first and after the
// caller's context has ended too (rideOut then types them at once), so that
// none reaches the caller raw; a single node's batch when its error is a
// reply (see batchDone).
//
//go:noinline
func (f *facade) failedBatch(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, err error) error {
	if f.batchRidesOut(cmds, err) {
		err = f.ride.batch(ctx, cmds, next, err)
	}
	return f.settledBatch(ctx, cmds, err)
}

// batchRidesOut is ridesOut for a batch that failed with err.
func (f *facade) batchRidesOut(cmds []redis.Cmder, err error) bool {
	refusalsShow := f.topo != nil || err == redis.Nil || isRedisReply(err)
	return refusalsShow && firstRefusal(cmds) != nil && !cmdsContainNoRetry(cmds)
}

// settledBatch is failedBatch once nothing is left to ride out.
func (f *facade) settledBatch(ctx context.Context, cmds []redis.Cmder, err error) error {
	f.nodes.sent.forget(cmds...) // the caller's operation ends here
	if f.topo == nil {
		if batchAnswered(err) {
			// A single node's replies, all read: nothing to translate.
			return err
		}
		return translateBatch(ctx, cmds, err, f.translate)
	}
	// A cluster batch's commands may hold what node guards sealed, and
	// what go-redis's transaction loop stamped on them after the guard
	// (a raw read error): each gets its caller's error.
	var unknown error
	for _, cmd := range cmds {
		if cerr := cmd.Err(); cerr != nil && cerr != redis.Nil {
			cerr = f.leftover(ctx, cmd, f.translate(ctx, cerr))
			cmd.SetErr(cerr)
			if unknown == nil && errors.Is(cerr, ErrOutcomeUnknown) {
				unknown = cerr
			}
		}
	}
	if err == nil || err == redis.Nil {
		return err
	}
	if unknown != nil {
		return unknown
	}
	return f.leftover(ctx, nil, f.translate(ctx, err))
}

// leftover types a network error that reached the cluster facade past
// every node guard: go-redis's cluster transaction loop reads EXEC's reply
// itself and hands the raw read error on. Like the guard's (callerError), it
// ends a command that may have run and is not safe to repeat with
// ErrOutcomeUnknown, and any other with ErrNodeFailed, naming the node the
// error names.
func (f *facade) leftover(ctx context.Context, cmd redis.Cmder, err error) error {
	if !isNetworkError(err) || isGuardError(err) || contextDone(ctx) != nil {
		return err
	}
	addr := ""
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Addr != nil {
		addr = opErr.Addr.String()
	}
	n, ok := f.nodes.lookup(addr)
	if !ok {
		n = &node{addr: addr}
	}
	if cmd != nil && mayHaveRun(ctx, err) && !repeatable(cmd) {
		return n.outcomeUnknown(cmd, err)
	}
	return n.unreachable(err)
}

// unusualBatch is the facade's step for a batch after Close, or one that
// blocks: a transaction (MULTI ... EXEC) is ordinary even with BLPOP inside,
// since Redis never blocks within EXEC; any other batch holding a blocking
// command goes to the long budget, and its refusals are ridden out.
//
//go:noinline
func (f *facade) unusualBatch(ctx context.Context, cmds []redis.Cmder, onTx bool) error {
	if f.k.closed.Load() {
		return failBatch(cmds, ErrClosed)
	}
	sent := f.k.clock.Now()
	err := f.adm.processBatch(ctx, cmds, onTx)
	if err == nil {
		return nil
	}
	if firstRefusal(cmds) != nil && !cmdsContainNoRetry(cmds) {
		// As long does for one command: the refused commands are sent
		// again, their waits shortened by the time spent.
		err = f.ride.batch(ctx, cmds, func(ctx context.Context, again []redis.Cmder) error {
			now := f.k.clock.Now()
			for _, cmd := range again {
				shortenWait(cmd.Args(), now.Sub(sent))
			}
			sent = now
			return f.adm.processBatch(ctx, again, onTx)
		}, err)
		if err == nil {
			return nil
		}
	}
	return translateBatch(ctx, cmds, err, f.translate)
}

// translateBatch returns err, a batch's, through translate, and passes each
// of its commands' errors through it too.
//
//go:noinline
func translateBatch(ctx context.Context, cmds []redis.Cmder, err error, translate func(context.Context, error) error) error {
	for _, cmd := range cmds {
		if cerr := cmd.Err(); cerr != nil && cerr != redis.Nil {
			cmd.SetErr(translate(ctx, cerr))
		}
	}
	return translate(ctx, err)
}

// translate is the caller's half of the error translation, the node
// guard's callerError the node's, which runs first, in every mode: a sealed
// error is opened, the caller's own context and a closed client take
// precedence, and Redis replies (including redis.Nil) pass through
// untouched: they are answers. What names a node (a transport failure, a
// pool timeout) the guard typed before go-redis's loops, and this step,
// saw it (TestErrorTranslationGuardThenFacade).
func (f *facade) translate(ctx context.Context, err error) error {
	if err == nil || err == redis.Nil {
		return err
	}
	err = unseal(err)
	if isRedisReply(err) {
		return err
	}
	if f.k.closed.Load() || errors.Is(err, redis.ErrClosed) {
		return ErrClosed
	}
	if ctxErr := contextDone(ctx); ctxErr != nil && !isGuardError(err) && !isExhaustion(err) {
		// The caller's own deadline or cancellation ended the call; go-redis
		// reports it as an i/o timeout on the socket. Hand back ctx.Err()
		// unchanged so callers can test it with ==. A pool that stayed
		// exhausted for PoolTimeout is the guard's to report, as the
		// decisions of redisguard's own are, whatever the context did
		// meanwhile.
		return ctxErr
	}
	return err
}

// contextDone returns the caller's context's error once it is done, and
// DeadlineExceeded as soon as its deadline has passed: go-redis sets the
// socket deadline from the context, and the socket can fire a hair before
// the context's own timer. A context admission derived for a long call
// (withCaller) answers for the caller's: its own deadline is a read budget,
// and a server that overruns it is failing, not the caller giving up.
func contextDone(ctx context.Context) error {
	if caller, ok := ctx.Value(callerKey{}).(context.Context); ok {
		ctx = caller
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// callerKey keys the caller's own context in one derived from it.
type callerKey struct{}

// withCaller returns derived, marked as derived from caller (see
// contextDone).
func withCaller(derived, caller context.Context) context.Context {
	return context.WithValue(derived, callerKey{}, caller)
}

// isRedisReply reports whether err is an error reply from the server.
func isRedisReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// isGuardError reports whether err is one of redisguard's own decisions,
// which take precedence over a context that expired meanwhile.
func isGuardError(err error) bool {
	return errors.Is(err, ErrNodeUnavailable) || errors.Is(err, ErrPoolExhausted) || errors.Is(err, ErrOutcomeUnknown) ||
		errors.Is(err, ErrClusterFailover) || errors.Is(err, ErrSlotMapCorruption) || errors.Is(err, ErrNotServing) ||
		errors.Is(err, ErrNodeFailed)
}
