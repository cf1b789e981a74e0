package redisproc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine (process waiters, go-redis pools)
// outlives the servers that started it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
