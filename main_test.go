package redisguard

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the library starts has an owner that stops it in Close;
// goleak proves it for the whole package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
