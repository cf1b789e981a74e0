package redisguard

import (
	"errors"
)

// setupError marks a failure to set up a connection: its dial (TLS
// included), the handshake go-redis runs on a fresh connection (HELLO, AUTH,
// SELECT, CLIENT SETNAME), or the CLIENT ID a dedicated connection starts
// with. Two things follow from it, whatever the cause looks like:
//
//   - The command that needed the connection was never written, so it did
//     not run: it is not ErrOutcomeUnknown, however unsafe to repeat.
//   - The node failed to take a client, which is a node fault even when it
//     shows as a reset: a healthy server's routine resets (CLIENT KILL, an
//     idle timeout) hit connections that have served commands, not ones
//     that never completed a handshake.
//
// The marker lives only between the node's hooks and is removed before an
// error reaches the caller (see withoutSetup).
type setupError struct{ err error }

func (e *setupError) Error() string { return e.err.Error() }

// Unwrap lists the cause instead of returning it: go-redis strips one level
// of wrapping (errors.Unwrap) from a failed handshake's error, and the
// marker must survive that. errors.Is and errors.As still see the cause.
func (e *setupError) Unwrap() []error { return []error{e.err} }

// setupFailure marks err, a failure to set up a connection.
func setupFailure(err error) error {
	if err == nil || isSetupFailure(err) {
		return err
	}
	return &setupError{err: err}
}

// isSetupFailure reports whether err failed a connection's set-up.
func isSetupFailure(err error) bool {
	var se *setupError
	return errors.As(err, &se)
}

// withoutSetup returns err without the marker, as the caller sees it.
func withoutSetup(err error) error {
	if se, ok := err.(*setupError); ok {
		return se.err
	}
	return err
}

// connInit is the go-redis function on the stack of every handshake command
// it sends on a fresh connection, and of no command a caller sends.
const connInit = "github.com/redis/go-redis/v9.(*baseClient).initConn"
