package redisguard

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// setupError marks a failure to set up a connection: its dial (TLS
// included), the handshake go-redis runs on a fresh connection (HELLO, AUTH,
// SELECT, CLIENT SETNAME), or the question for its id a dedicated
// connection starts with. The command that needed the connection was never
// written, so it did not run: it is not ErrOutcomeUnknown, however unsafe
// to repeat.
//
// A set-up that failed before the server answered anything (the dial, or
// the HELLO that opens every handshake) also fails the node, even when it
// shows as a reset: the routine resets of a healthy server (CLIENT KILL, an
// idle timeout) hit connections that have been answered, while a node that
// hangs up on every new connection (a proxy whose backend is gone) never
// answers at all. A later step's reset is a healthy server's routine like
// any other (outcome).
//
// The marker lives only between the node's hooks and is removed before an
// error reaches the caller (see withoutSetup) or a user's hook (see
// userHooks.process). It is never put on the handshake of a PubSub's
// connection, whose error go-redis hands to the PubSub's caller with no
// redisguard frame in between: those connections are the subscriptions
// clients' alone, whose guards mark nothing (nodeGuard.subscriptions).
type setupError struct {
	err      error
	answered bool // the server had answered on the connection before it failed
}

func (e *setupError) Error() string { return e.err.Error() }

// Unwrap lists the cause instead of returning it: go-redis strips one level
// of wrapping (errors.Unwrap) from a failed handshake's error, and the
// marker must survive that. errors.Is and errors.As still see the cause.
func (e *setupError) Unwrap() []error { return []error{e.err} }

// setupFailure marks err, a failure to set up a connection; answered says
// whether the server had answered on it before. A marked error keeps its
// mark.
func setupFailure(err error, answered bool) error {
	if err == nil || isSetupFailure(err) {
		return err
	}
	return &setupError{err: err, answered: answered}
}

// isSetupFailure reports whether err failed a connection's set-up.
func isSetupFailure(err error) bool {
	var se *setupError
	return errors.As(err, &se)
}

// isUnansweredSetup reports whether err failed a connection's set-up before
// the server answered anything on it.
func isUnansweredSetup(err error) bool {
	var se *setupError
	return errors.As(err, &se) && !se.answered
}

// withoutSetup returns err without the marker, as the caller sees it.
func withoutSetup(err error) error {
	if se, ok := err.(*setupError); ok {
		return se.err
	}
	return err
}

// remarkHandshake puts the mark back on what a user's hook returned for
// cmd, sent with ctx, if cmd is a handshake command that failed on the
// network.
func remarkHandshake(ctx context.Context, cmd redis.Cmder, err error) error {
	if err == nil || !isNetworkError(err) || isSetupFailure(err) || !isHandshake(ctx, cmd) {
		return err
	}
	return handshake(err, isHello(cmd))
}

// setUpKey marks the context an OnConnect runs with (duringSetUp).
type setUpKey struct{}

// duringSetUp returns onConnect run with a context that says its commands
// set up the connection (settingUp): go-redis calls the Options' OnConnect
// at the end of initConn, on the fresh connection, from inside the
// operation that needed it. nil stays nil, and a context already marked is
// passed on as it is.
func duringSetUp(onConnect func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	if onConnect == nil {
		return nil
	}
	return func(ctx context.Context, cn *redis.Conn) error {
		if !settingUp(ctx) {
			ctx = context.WithValue(ctx, setUpKey{}, true)
		}
		return onConnect(ctx, cn)
	}
}

// settingUp reports whether ctx is one an OnConnect runs with.
func settingUp(ctx context.Context) bool {
	return ctx.Value(setUpKey{}) != nil
}
