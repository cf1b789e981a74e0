//go:build unix

package redisproc

import "syscall"

// Pause and Resume are SIGSTOP and SIGCONT.
const (
	sigStop = syscall.SIGSTOP
	sigCont = syscall.SIGCONT
)

// platformProblem is empty where the harness works.
const platformProblem = ""
