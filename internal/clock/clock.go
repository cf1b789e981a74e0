// Package clock lets time-dependent components ask what time it is through an
// interface, so that their tests can control time instead of sleeping.
//
// A Clock only answers "what time is it". Components that need to wait use
// timers or contexts directly; a fake clock that also drove timers would make
// every test depend on the order in which goroutines observe an Advance.
package clock

import "time"

// Clock reports the current time.
type Clock interface {
	Now() time.Time
}

// Real returns the Clock backed by time.Now. Its readings carry the monotonic
// clock reading, so durations computed from them are immune to wall-clock
// jumps.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
