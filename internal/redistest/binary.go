package redistest

import (
	"errors"
	"os"
	"testing"

	"github.com/redisguard/redisguard/internal/redisproc"
)

// Environment variables that control how servers are found.
const (
	// EnvServer names the redis-server binary (a path, or a name looked up on
	// PATH). Empty means "redis-server".
	EnvServer = redisproc.EnvServer
	// EnvRequireServer set to "1" turns a missing binary into a test failure.
	// CI sets it so that a broken image cannot silently skip every
	// integration test.
	EnvRequireServer = "REDISGUARD_REQUIRE_SERVER"
)

// Binary returns the path of the redis-server binary: $REDIS_SERVER, else
// "redis-server" on PATH. When it cannot be found the test is skipped, or
// fails if REDISGUARD_REQUIRE_SERVER=1.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := redisproc.Binary()
	if err == nil {
		return path
	}
	required := os.Getenv(EnvRequireServer) == "1"
	if errors.Is(err, redisproc.ErrUnsupported) {
		if required {
			t.Fatalf("redistest: %v", err)
		}
		t.Skipf("redistest: skipping: %v", err)
	}
	if required {
		t.Fatalf("redistest: redis-server is required (%s=1) but not usable: %v; install redis-server 7+ or set %s",
			EnvRequireServer, err, EnvServer)
	}
	t.Skipf("redistest: skipping, redis-server not found: %v; install redis-server 7+ or set %s (set %s=1 to fail instead)",
		err, EnvServer, EnvRequireServer)
	return ""
}
