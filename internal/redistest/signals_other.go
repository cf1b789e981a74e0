//go:build !unix

package redistest

import "syscall"

// There is no SIGSTOP or SIGCONT; these values only keep the package
// compiling, since Binary skips every test first.
const (
	sigStop syscall.Signal = -1
	sigCont syscall.Signal = -1
)

// platformProblem makes Binary skip: pausing servers needs Unix signals.
const platformProblem = "redistest needs a Unix system (SIGSTOP/SIGCONT)"
