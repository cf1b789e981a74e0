package redisproc

import (
	"errors"
	"os"
	"os/exec"
)

// EnvServer names the redis-server binary (a path, or a name looked up on
// PATH). Empty means "redis-server".
const EnvServer = "REDIS_SERVER"

// ErrUnsupported means this platform cannot control servers the way the
// package promises: Pause and Resume need SIGSTOP and SIGCONT.
var ErrUnsupported = errors.New(platformProblemOr("redisproc: unsupported platform"))

func platformProblemOr(fallback string) string {
	if platformProblem != "" {
		return platformProblem
	}
	return fallback
}

// Binary returns the path of the redis-server binary: $REDIS_SERVER, else
// "redis-server" on PATH. The error wraps ErrUnsupported on a platform
// without Unix signals, and exec's lookup error otherwise.
func Binary() (string, error) {
	if platformProblem != "" {
		return "", ErrUnsupported
	}
	name := os.Getenv(EnvServer)
	if name == "" {
		name = "redis-server"
	}
	return exec.LookPath(name)
}
