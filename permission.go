package redisguard

import (
	"log/slog"
	"strings"
	"sync/atomic"
)

// Some of what the client needs to know it asks the servers itself: whether
// a server is a master or a cluster node and a connection's id (HELLO,
// which every user may send), which commands are reads (COMMAND), a
// replica's lag (INFO replication), who owns a slot (CLUSTER NODES). An
// application's user may be denied those commands without ever needing them
// for its own (docs/acl.md lists them). Each such question has one denial:
// the first refusal is logged once, at warn, saying what the client does
// without the answer and what to grant; from then on the question is not
// sent again for the client's life, and the client does what the log line
// says. A question that failed otherwise (a timeout, a reset) is not
// refused: it is asked again as its component says.

// question is a command the client sends for itself, as ACL rules name it
// ("command", "client|unblock"), and what the client does without its
// answer, for the log line.
type question struct{ what, instead string }

// denial remembers that the servers refused a question. The zero value is
// a question not refused.
type denial struct{ denied atomic.Bool }

// refused reports whether the question has been refused.
func (d *denial) refused() bool { return d.denied.Load() }

// refusedBy reports whether err, addr's answer to q, refuses it
// (isRefusal), and if so records the refusal as refuse does.
func (d *denial) refusedBy(k *core, q question, addr string, err error) bool {
	if !isRefusal(err) {
		return false
	}
	d.refuse(k, q, addr, err)
	return true
}

// refuse records that addr refused q with err: the first refusal is logged
// on k's logger, and no other ever is.
func (d *denial) refuse(k *core, q question, addr string, err error) {
	if d.denied.CompareAndSwap(false, true) {
		k.log.Warn("redisguard: a server refused a command the client sends for itself; "+q.instead,
			slog.String("command", strings.ToUpper(strings.ReplaceAll(q.what, "|", " "))),
			slog.String("grant", "+"+q.what), slog.String("addr", addr),
			slog.String("err", k.redact(err.Error())))
	}
}

// isRefusal reports whether err is a server's refusal to run the command
// at all, which asking again would not change: the user may not run it
// (NOPERM), or the server (an older version, a proxy) does not know it.
// The reply must be the command's own: a connection whose set-up was
// refused (go-redis wraps that reply) never asked the question.
func isRefusal(err error) bool {
	if err == nil || !isRedisReply(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command") ||
		strings.HasPrefix(msg, "ERR unknown subcommand")
}
