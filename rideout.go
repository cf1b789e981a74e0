package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/flight"
)

// rideOut waits out the replies that say the server cannot serve a command
// now and did not run it (notServing): CLUSTERDOWN between a master's FAIL
// mark and its replica's promotion, TRYAGAIN during a slot migration,
// LOADING after a restart, MASTERDOWN from a replica that lost its master,
// and READONLY from the node the client takes for the master. Any command
// may be sent again after them. go-redis's cluster loop retries them for
// about 100ms and then hands the raw reply to the caller; a failover's
// window is seconds long.
//
// A command that meets one is sent again after a jittered back-off that
// doubles each round, for as long as the caller's deadline allows and at
// most ClusterNodeTimeout after the first reply; after that it fails with
// ErrNotServing, which quotes the reply. Concurrent callers share the wait:
// one of them (the round's leader) sends its command again at the end of
// the back-off, and the others wait for what it hears, so that a herd of
// waiting callers costs the server one command per round until it serves.
// A reply is an answer: none of this touches a breaker.
//
// It measures by the real clock, as the callers' deadlines do (now and
// after stand for it in tests).
type rideOut struct {
	max   time.Duration // ClusterNodeTimeout
	first time.Duration // the first round's back-off (rideOutFirst)
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
	// readOnly, if set, runs at the start of a round after a READONLY:
	// the pooled connections lead to a demoted master (Standalone), or the
	// sentinels must be asked for the new one.
	readOnly func()
	// whole, if set, runs when a round after CLUSTERDOWN ends served: the
	// cluster covers every slot again, most often because a replica was
	// promoted, so the slot map is to be fetched now rather than at the
	// next refresh the failing commands may ask for (Cluster).
	whole func()

	// rounds holds the round in progress for each kind of reply: one
	// back-off and the leader's send after it, which ends the round with
	// whether the server served.
	rounds flight.Group[string, bool]
}

// Back-off of the rounds: the first lasts rideOutFirst, each of the next
// twice the one before, up to rideOutMax; every one is scaled by a factor
// between 0.8 and 1.2.
const (
	rideOutFirst = 50 * time.Millisecond
	rideOutMax   = 250 * time.Millisecond
)

func newRideOut(max time.Duration, readOnly, whole func()) *rideOut {
	return &rideOut{max: max, first: rideOutFirst, readOnly: readOnly, whole: whole, now: time.Now, after: time.After}
}

// notServing reports whether err is a reply that says the server cannot
// serve the command now and did not run it.
func notServing(err error) bool {
	return err != nil && err != redis.Nil && isRedisReply(err) && (redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsLoadingError(err) || redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) || isDemotedUnblock(err))
}

// isDemotedUnblock reports whether err is what a master that becomes a
// replica answers the blocking calls waiting on it ("UNBLOCKED force
// unblock from blocking operation, instance state changed (master ->
// replica?)"): they did not run, and their keys are served elsewhere now.
// The UNBLOCKED of a CLIENT UNBLOCK, redisguard's own, is not it.
func isDemotedUnblock(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "UNBLOCKED ") && strings.Contains(msg, "instance state changed")
}

// refusalKind is the reply's first word: CLUSTERDOWN, TRYAGAIN...
func refusalKind(err error) string {
	kind, _, _ := strings.Cut(err.Error(), " ")
	return kind
}

// notServingError is ErrNotServing for one reply, which it quotes: wrapped,
// it would look to go-redis's retry loops like the reply itself.
func notServingError(reply error) error {
	return fmt.Errorf("%w: %s", ErrNotServing, reply.Error())
}

// process sends a command again with send while its reply is one that
// notServing accepts, err being the first; it returns the last answer, or
// ErrNotServing once the caller's deadline or r.max leaves no time for
// another round, or the deadline passes while it waits or while the
// command, sent again, has not been answered (then the error is also the
// context's). A caller whose context is cancelled while it waits gets its
// context's error.
func (r *rideOut) process(ctx context.Context, err error, send func(context.Context) error) error {
	if !notServing(err) {
		return err
	}
	again := func(refusal error) error {
		err := send(ctx)
		if unansweredByDeadline(ctx, err) {
			return refusedUntilDeadline(refusal, err)
		}
		return err
	}
	until := r.now().Add(r.max)
	if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
		until = dl
	}
	for attempt := 0; notServing(err); attempt++ {
		wait := r.backoff(attempt)
		if !r.now().Add(wait).Before(until) {
			return notServingError(err)
		}
		kind := refusalKind(err)
		rd, leader := r.rounds.Join(kind)
		if !leader {
			select {
			case <-rd.Done():
			case <-r.after(until.Sub(r.now())):
				return notServingError(err)
			case <-ctx.Done():
				return waitEnded(ctx, err)
			}
			if rd.Val() { // served
				err = again(err)
			}
			continue
		}
		if kind == "READONLY" && r.readOnly != nil {
			r.readOnly()
		}
		select {
		case <-r.after(wait):
		case <-ctx.Done():
			r.rounds.End(kind, rd, false)
			return waitEnded(ctx, err)
		}
		err = again(err)
		served := !notServing(err)
		if served && kind == "CLUSTERDOWN" && r.whole != nil {
			r.whole()
		}
		r.rounds.End(kind, rd, served)
	}
	return err
}

// unansweredByDeadline reports whether err, the answer to a command sent
// again after a refusal, says the caller's deadline passed before it was
// answered, and it cannot have run (ErrOutcomeUnknown says when it may
// have): then the refusal is the server's last word (refusedUntilDeadline).
func unansweredByDeadline(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && !errors.Is(err, ErrOutcomeUnknown) && !isRedisReply(err)
}

// refusedUntilDeadline is ErrNotServing with refusal, which also says that
// the deadline (err) ended the wait.
func refusedUntilDeadline(refusal, err error) error {
	return fmt.Errorf("%w: %w", notServingError(refusal), err)
}

// waitEnded is what a caller whose context ended while it waited to send
// again is told: ErrNotServing with the last refusal if its deadline
// passed, as when no time is left for another round, and its context's
// error if it was cancelled.
func waitEnded(ctx context.Context, refusal error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return notServingError(refusal)
	}
	return ctx.Err()
}

// backoff is the wait before the round after attempt earlier ones.
func (r *rideOut) backoff(attempt int) time.Duration {
	d := rideOutMax
	if attempt < 10 {
		d = min(r.first<<attempt, rideOutMax)
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// batch rides out the commands of cmds, a batch that next has answered
// with err, whose replies notServing accepts: after each round's wait it
// sends again those still refused (a transaction whole: a refusal in it
// means it did not run), while the rest keep their answers. The refusals
// left at the end become ErrNotServing, as does a command sent again that
// the caller's deadline left unanswered (unansweredByDeadline). It returns
// the batch's error, as next does.
func (r *rideOut) batch(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook, err error) error {
	first := firstRefusal(cmds)
	if first == nil {
		return err
	}
	tx := isTxBatch(cmds)
	again := refusedCmds(cmds)
	if tx {
		again = cmds
	}
	refusals := make([]error, len(again))
	err = r.process(ctx, first, func(ctx context.Context) error {
		for i, cmd := range again {
			refusals[i] = cmd.Err()
			cmd.SetErr(nil)
		}
		_ = next(ctx, again)
		for i, cmd := range again {
			if refusals[i] != nil && unansweredByDeadline(ctx, cmd.Err()) {
				cmd.SetErr(refusedUntilDeadline(refusals[i], cmd.Err()))
			}
		}
		if !tx {
			again = refusedCmds(again)
		}
		return firstRefusal(again)
	})
	typeRefusals(cmds)
	if err != nil && !notServing(err) && !errors.Is(err, ErrNotServing) {
		return err // the caller's context
	}
	return firstErr(cmds)
}

// refusedCmds returns the commands of cmds whose reply notServing accepts.
func refusedCmds(cmds []redis.Cmder) []redis.Cmder {
	var out []redis.Cmder
	for _, cmd := range cmds {
		if notServing(cmd.Err()) {
			out = append(out, cmd)
		}
	}
	return out
}

// firstRefusal returns the first reply of cmds that notServing accepts.
func firstRefusal(cmds []redis.Cmder) error {
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && e != redis.Nil && notServing(e) {
			return e
		}
	}
	return nil
}

// typeRefusals turns the refusals left in cmds into ErrNotServing.
func typeRefusals(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if e := cmd.Err(); notServing(e) {
			cmd.SetErr(notServingError(e))
		}
	}
}

// cmdsContainNoRetry reports whether a command of cmds is marked NoRetry.
func cmdsContainNoRetry(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if cmd.NoRetry() {
			return true
		}
	}
	return false
}

// firstErr returns the first error of cmds but redis.Nil, as a go-redis
// pipeline returns it.
func firstErr(cmds []redis.Cmder) error {
	for _, cmd := range cmds {
		if e := cmd.Err(); e != nil && e != redis.Nil {
			return e
		}
	}
	return nil
}
