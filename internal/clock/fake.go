package clock

import (
	"sync"
	"time"
)

// Fake is a Clock that moves only when told to. It is meant for tests.
// The zero Fake reads the zero time. A Fake is safe for concurrent use, so a
// test may advance it while the code under test reads it.
type Fake struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewFake returns a Fake that reads start until it is advanced or set.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start}
}

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake's time forward by d. A negative d moves it back,
// which lets tests check how a component copes with a clock that jumps.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
}

// Set makes the fake read t from now on.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}
