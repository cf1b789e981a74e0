//go:build !linux

package redisproc

import "os/exec"

// setParentDeathSignal has no portable equivalent; outside Linux an aborted
// test binary relies on its cleanups alone.
func setParentDeathSignal(*exec.Cmd) {}

// isStopped cannot be observed portably; Pause then trusts kill(2).
func isStopped(int) (bool, error) { return true, nil }
