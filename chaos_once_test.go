package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The once-only writers of the chaos soak (chaos_test.go); their check is
// in chaos_once_verdict_test.go. Every operation of a once-only writer is
// unsafe to repeat and has an id of its own: it increments a key no other
// operation touches, through an autopipeliner or inside a Lua script. The
// writer records what the caller was told; at the end the keys' values on
// the servers say how often each operation ran, and onceVerdict holds the
// two against each other:
//   - told it ran: ran exactly once (unless a data-losing fault may have
//     dropped the write with its shard's master);
//   - told the outcome is unknown (ErrOutcomeUnknown, the caller's context):
//     ran at most once;
//   - told it did not run (ErrNodeFailed, ErrNodeUnavailable, ErrNotServing,
//     a Redis error reply, ...): ran never;
//   - and whatever it was told, ran at most once.

// onceGroups is how many hash tags each writer spreads its keys over: a few
// dozen slots in all, each with a steady stream of new keys, which the
// resharding step migrates.
const onceGroups = 4

// onceFanout is how many INCRs an autopipelined writer has in flight at
// once, so that its autopipeliner batches them with the others'.
const onceFanout = 3

// onceLua increments its first key, and its second if given, in one run,
// and answers the first's new value. Two keys of one slot make a multi-key
// command, which a slot in migration refuses with TRYAGAIN while its keys
// are split between the two masters.
const onceLua = `if KEYS[2] then redis.call('INCR', KEYS[2]) end return redis.call('INCR', KEYS[1])`

var onceScript = redis.NewScript(onceLua)

// onceTold is what a caller of a once-only operation was told.
type onceTold uint8

const (
	toldNothing   onceTold = iota // not yet answered
	toldRan                       // success, the INCR answering 1
	toldRanBefore                 // success, the INCR answering more than 1: it had run before
	toldMaybe                     // the outcome is unknown: at most once
	toldNotRun                    // it did not run
)

// toldOf is what err tells the caller of an operation that is not safe to
// repeat, by the contract of errors.go; v is the INCR's answer.
func toldOf(err error, v int64) onceTold {
	switch {
	case err == nil && v > 1:
		return toldRanBefore
	case err == nil:
		return toldRan
	case errors.Is(err, ErrOutcomeUnknown), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return toldMaybe
	case errors.Is(err, ErrNodeFailed), errors.Is(err, ErrNodeUnavailable), errors.Is(err, ErrPoolExhausted),
		errors.Is(err, ErrNotServing), errors.Is(err, ErrClusterFailover), errors.Is(err, ErrSlotMapCorruption),
		errors.Is(err, ErrClosed), errors.Is(err, redis.ErrClosed), isRedisReply(err):
		return toldNotRun
	}
	return toldMaybe // a bare network error, or an untyped one (a violation of its own)
}

// onceWriter is one writer's record: operation n incremented onceKey(id, n),
// and told[n] is what its caller was told. The writer's goroutine appends
// (issue) while none of its operations is in flight; each operation's
// goroutine writes its own element.
type onceWriter struct {
	id   int
	kind string // the record kind: once-auto, once-script
	told []onceTold
}

// issue reserves k operations and returns the first one's number.
func (o *onceWriter) issue(k int) int {
	n := len(o.told)
	o.told = append(o.told, make([]onceTold, k)...)
	return n
}

// onceTag is the hash tag of group g of writer id.
func onceTag(id, g int) string {
	return "{chaos:once:" + strconv.Itoa(id) + ":" + strconv.Itoa(g) + "}"
}

// onceKey is the key operation n of writer id increments.
func onceKey(id, n int) string { return onceTag(id, n%onceGroups) + ":" + strconv.Itoa(n) }

func (w *chaosWorld) newOnceWriter(id int, kind string) *onceWriter {
	o := &onceWriter{id: id, kind: kind}
	w.onceMu.Lock()
	w.once = append(w.once, o)
	w.onceMu.Unlock()
	return o
}

// onceAutoWriter sends its INCRs through its client's autopipeliner,
// onceFanout at a time, beside the other autopipelined writers.
func (w *chaosWorld) onceAutoWriter(id int, rng *rand.Rand, stop <-chan struct{}) {
	o := w.newOnceWriter(id, "once-auto")
	ap := w.auto
	if w.client(id, 2) == w.acl {
		ap = w.aclAuto
	}
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		first := o.issue(onceFanout)
		var wg sync.WaitGroup
		for n := first; n < first+onceFanout; n++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer w.recoverPanic(id)
				key := onceKey(id, n)
				v, err := ap.Incr(ctx, key).Result()
				o.told[n] = toldOf(err, v)
				w.record(o.kind, w.shard(key), t0, dl, err)
			}()
		}
		wg.Wait()
	})
}

// onceScriptWriter runs onceLua in each way a script is sent: EVAL,
// EVALSHA (NOSCRIPT on a node that has not seen it: it did not run), and
// Script.Run (EVALSHA, then EVAL on NOSCRIPT); one in four with a second
// key of the same slot.
func (w *chaosWorld) onceScriptWriter(id int, rng *rand.Rand, stop <-chan struct{}) {
	o := w.newOnceWriter(id, "once-script")
	c := w.client(id, 2)
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		n := o.issue(1)
		key := onceKey(id, n)
		keys := []string{key}
		if rng.IntN(4) == 0 {
			keys = append(keys, key+":b")
		}
		var cmd *redis.Cmd
		switch rng.IntN(3) {
		case 0:
			cmd = c.Eval(ctx, onceLua, keys)
		case 1:
			cmd = c.EvalSha(ctx, onceScript.Hash(), keys)
		default:
			cmd = onceScript.Run(ctx, c, keys)
		}
		v, err := cmd.Int64()
		o.told[n] = toldOf(err, v)
		w.record(o.kind, w.shard(key), t0, dl, err)
	})
}

// onceSlots are the slots of every once-only writer's key groups.
func onceSlots(writers []int) []int {
	var slots []int
	for _, id := range writers {
		for g := range onceGroups {
			slots = append(slots, redistest.Slot(onceTag(id, g)))
		}
	}
	return slots
}

// What each error of the documented set tells the caller of an unsafe
// command about whether it ran.
func TestToldOf(t *testing.T) {
	node := func(err error) error { return &NodeError{Addr: "127.0.0.1:7000", Err: err, cause: syscall.ECONNRESET} }
	for _, tc := range []struct {
		name string
		err  error
		v    int64
		want onceTold
	}{
		{"success", nil, 1, toldRan},
		{"success answering 2", nil, 2, toldRanBefore},
		{"outcome unknown", node(fmt.Errorf("%w: INCR may have run", ErrOutcomeUnknown)), 0, toldMaybe},
		{"deadline", context.DeadlineExceeded, 0, toldMaybe},
		{"cancelled", fmt.Errorf("wrapped: %w", context.Canceled), 0, toldMaybe},
		{"bare network error", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, 0, toldMaybe},
		{"untyped", errors.New("something else"), 0, toldMaybe},
		{"node failed", node(fmt.Errorf("%w: dial refused", ErrNodeFailed)), 0, toldNotRun},
		{"breaker open", node(ErrNodeUnavailable), 0, toldNotRun},
		{"node slow", node(ErrNodeSlow), 0, toldNotRun},
		{"pool exhausted", node(ErrPoolExhausted), 0, toldNotRun},
		{"not serving", notServingError(redisErr("TRYAGAIN Multiple keys request during rehashing of slot")), 0, toldNotRun},
		{"failover", ErrClusterFailover, 0, toldNotRun},
		{"slot map", ErrSlotMapCorruption, 0, toldNotRun},
		{"closed", ErrClosed, 0, toldNotRun},
		{"NOSCRIPT", redisErr("NOSCRIPT No matching script."), 0, toldNotRun},
		{"raw ASK", redisErr("ASK 3999 127.0.0.1:7001"), 0, toldNotRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toldOf(tc.err, tc.v); got != tc.want {
				t.Fatalf("toldOf(%v, %d) = %s, want %s", tc.err, tc.v, got, tc.want)
			}
		})
	}
}
