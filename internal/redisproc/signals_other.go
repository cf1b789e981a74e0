//go:build !unix

package redisproc

import "syscall"

// There is no SIGSTOP or SIGCONT; these values only keep the package
// compiling, since Binary refuses to hand out a binary first.
const (
	sigStop syscall.Signal = -1
	sigCont syscall.Signal = -1
)

// platformProblem makes Binary fail: pausing servers needs Unix signals.
const platformProblem = "redisproc needs a Unix system (SIGSTOP/SIGCONT)"
