package redisproc

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	// stopGrace is how long a clean stop waits after SIGTERM before SIGKILL.
	// Persistence is off and shutdown-timeout is 0, so redis normally exits in
	// milliseconds; the margin is for a loaded CI machine.
	stopGrace = 5 * time.Second

	logName    = "redis.log"  // redis's own log (--logfile)
	stdioName  = "stdout.log" // stdout and stderr: config errors land here before the logfile is open
	tailLines  = 25
	tailMaxLen = 8 << 10
)

// process is one run of redis-server. A single goroutine waits for it and
// closes done; it ends when the process exits, and every owner of a process
// makes sure it exits (stop or kill) in Close, so the goroutine never
// outlives its Server.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // result of cmd.Wait; read only after done is closed
}

// spawn starts bin with args in dir. Output goes to a file rather than a pipe
// so that os/exec starts no copying goroutines and a crash's last words are
// kept for the failure message.
func spawn(bin string, args []string, dir string) (*process, error) {
	out, err := os.OpenFile(filepath.Join(dir, stdioName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// The child holds its own copy of the descriptor.
	defer out.Close()

	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = out
	cmd.Stderr = out
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) signal(sig syscall.Signal) {
	// An error means the process has already exited, which every caller
	// tolerates: they all go on to wait for done.
	_ = p.cmd.Process.Signal(sig)
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// stop asks the process to exit (SIGCONT first, since a stopped process does
// not act on SIGTERM until it runs again) and kills it after stopGrace. It
// returns an error only if the kill was needed.
func (p *process) stop() error {
	p.signal(sigCont)
	p.signal(syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	p.kill()
	return fmt.Errorf("redis-server pid %d ignored SIGTERM for %v and was killed", p.pid(), stopGrace)
}

// logTail returns the last lines of a server's log and captured output, for
// failure messages.
func logTail(dir string) string {
	var b strings.Builder
	for _, name := range []string{stdioName, logName} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		if len(data) > tailMaxLen {
			data = data[len(data)-tailMaxLen:]
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > tailLines {
			lines = lines[len(lines)-tailLines:]
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", filepath.Join(dir, name), strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output in " + dir + ")"
	}
	return b.String()
}

// logMentionsBindFailure reports whether redis gave up because its port was
// taken: the signature of a race with another test process over a port that
// was free when it was picked.
func logMentionsBindFailure(dir string) bool {
	for _, name := range []string{stdioName, logName} {
		data, _ := os.ReadFile(filepath.Join(dir, name))
		if bytes.Contains(data, []byte("Address already in use")) {
			return true
		}
	}
	return false
}
