package redisguard

import (
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// How long a blocking command may rightly hold its reply back: its own
// timeout, read from its arguments as Redis reads it.

// blockingTimeouts says where each blocking command's own timeout is: the
// position of the argument (-1: the last) and its unit. The stream and
// time-series reads take theirs from their BLOCK option, in milliseconds.
var blockingTimeouts = []struct {
	name string // upper case
	pos  int
	unit time.Duration
}{
	{"BLPOP", -1, time.Second},
	{"BRPOP", -1, time.Second},
	{"BRPOPLPUSH", -1, time.Second},
	{"BLMOVE", -1, time.Second},
	{"BZPOPMIN", -1, time.Second},
	{"BZPOPMAX", -1, time.Second},
	{"BLMOVEM", 5, time.Second}, // source destination wherefrom whereto timeout [options]
	{"BLMPOP", 1, time.Second},  // timeout numkeys key...
	{"BZMPOP", 1, time.Second},
	{"WAIT", 2, time.Millisecond},    // numreplicas timeout
	{"WAITAOF", 3, time.Millisecond}, // numlocal numreplicas timeout
}

// maxWait is the longest own timeout taken at its word; a longer one waits
// forever as far as a read deadline is concerned.
const maxWait = 100 * 365 * 24 * time.Hour

// blockingWait returns how long a blocking command may hold its reply back
// by its own timeout; forever is true for a timeout of 0, which waits until
// the command is served. An ordinary command, a non-blocking XREAD, and a
// timeout that cannot be read wait 0: Redis answers those at once, with an
// error if the timeout is malformed.
func blockingWait(args []interface{}) (wait time.Duration, forever bool) {
	pos, unit := waitArg(args)
	if pos < 0 {
		return 0, false
	}
	n, ok := argNumber(args[pos])
	switch {
	case !ok || n < 0 || n != n: // unreadable, negative or NaN: refused at once
		return 0, false
	case n == 0 || n*float64(unit) > float64(maxWait):
		return 0, true
	}
	return time.Duration(n * float64(unit)), false
}

// waitArg returns the position of the blocking command args's own timeout
// and its unit; -1 for a command without one.
func waitArg(args []interface{}) (pos int, unit time.Duration) {
	if len(args) == 0 {
		return -1, 0
	}
	switch argCommandKind(args[0]) {
	case kindBlocking:
		for _, bt := range blockingTimeouts {
			if !argSpells(args[0], bt.name) {
				continue
			}
			pos := bt.pos
			if pos < 0 {
				pos = len(args) - 1
			}
			if pos < 1 || pos >= len(args) {
				return -1, 0
			}
			return pos, bt.unit
		}
	case kindStreamRead:
		if i := blockOption(args, 1, streamReadOptions); i >= 0 && i+1 < len(args) {
			return i + 1, time.Millisecond
		}
	case kindTSRead:
		if i := blockOption(args, 3, tsReadOptions); i >= 0 && i+1 < len(args) {
			return i + 1, time.Millisecond
		}
	}
	return -1, 0
}

// shortenWait lowers the own timeout of the blocking command args, about to
// be sent again after it waited for elapsed, by elapsed: in all it waits no
// longer than it asked to. Never to 0, which would wait forever. A command
// that waits forever, or whose timeout cannot be read, is left as it is.
func shortenWait(args []interface{}, elapsed time.Duration) {
	pos, unit := waitArg(args)
	if pos < 0 {
		return
	}
	n, ok := argNumber(args[pos])
	if !ok || n <= 0 || n != n || n*float64(unit) > float64(maxWait) {
		return
	}
	left := max(time.Duration(n*float64(unit))-elapsed, time.Millisecond)
	if unit == time.Second {
		args[pos] = strconv.FormatFloat(left.Seconds(), 'f', 3, 64)
		return
	}
	args[pos] = strconv.FormatInt(left.Milliseconds(), 10)
}

// batchWait is how long the server may hold a batch's replies back by the
// blocking commands' own timeouts: their sum, as it serves them one after
// another, or forever if one of them waits forever. Blocking commands
// between MULTI and EXEC never wait (see batchIsBlocking).
func batchWait(cmds []redis.Cmder) (wait time.Duration, forever bool) {
	for it := range batchItems(cmds) {
		if it.queued {
			continue
		}
		d, always := blockingWait(it.args)
		if always {
			return 0, true
		}
		wait += d
	}
	return wait, false
}

// argNumber reads a number argument as go-redis's writer sends it: a
// string, bytes, or a Go number (a time.Duration is sent as its count of
// nanoseconds).
func argNumber(arg interface{}) (float64, bool) {
	switch v := arg.(type) {
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	case []byte:
		f, err := strconv.ParseFloat(string(v), 64)
		return f, err == nil
	case *string:
		if v != nil {
			f, err := strconv.ParseFloat(*v, 64)
			return f, err == nil
		}
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	case int16:
		return float64(v), true
	case int8:
		return float64(v), true
	case uint:
		return float64(v), true
	case uint64:
		return float64(v), true
	case uint32:
		return float64(v), true
	case uint16:
		return float64(v), true
	case uint8:
		return float64(v), true
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case time.Duration:
		return float64(v), true
	}
	return 0, false
}
