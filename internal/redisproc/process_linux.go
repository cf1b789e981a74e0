package redisproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// setParentDeathSignal makes the kernel kill redis if the program that
// started it dies without closing it (a panic from a test's -timeout
// watchdog, a demo killed with SIGKILL), so an aborted run leaves no servers
// behind. The signal is tied to the OS thread that forked, which the Go
// runtime keeps alive unless a goroutine exits while locked to it; this
// package never locks threads.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// isStopped reports whether pid is in the stopped state. kill(2) returns
// before a SIGSTOP has taken effect, and Pause promises the server is frozen
// when it returns.
func isStopped(pid int) (bool, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, err
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain spaces or parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false, fmt.Errorf("unexpected /proc stat format: %q", data)
	}
	return data[i+2] == 'T' || data[i+2] == 't', nil
}
