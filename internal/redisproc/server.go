package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

const (
	// startAttempts bounds how often a start is retried because another
	// process took the chosen port between the probe and redis's bind.
	startAttempts = 5
)

// errPortTaken marks a start that failed because some other process owns the
// port; starts are retried with a new port.
var errPortTaken = errors.New("port taken by another process")

// Env says where servers come from. The zero Env is ready to use: it finds
// the binary with Binary and gives each server a fresh directory under
// os.TempDir that Close removes.
type Env struct {
	// Bin is the redis-server binary.
	// default: Binary()
	Bin string

	// TempDir returns a fresh, empty working directory for one server. The
	// caller owns what it returns: Close leaves it in place.
	// default: a new directory under os.TempDir, removed by Close
	TempDir func() (string, error)

	// OnStart, if set, is called with every server before its process is
	// started, so that the caller can arrange for Close whatever happens
	// next (a test registers it as a cleanup). Starts that fail close their
	// server themselves, and Close is idempotent, so both may happen.
	// default: nil
	OnStart func(*Server)
}

func (e Env) bin() (string, error) {
	if e.Bin != "" {
		return e.Bin, nil
	}
	bin, err := Binary()
	if err != nil {
		return "", fmt.Errorf("redisproc: no redis-server: %w", err)
	}
	return bin, nil
}

func (e Env) dir() (dir string, owned bool, err error) {
	if e.TempDir != nil {
		dir, err = e.TempDir()
		return dir, false, err
	}
	dir, err = os.MkdirTemp("", "redisproc-")
	return dir, true, err
}

// Server is one redis-server process (plain, replica, cluster node or
// sentinel). Its address, port and directory never change, including across
// Kill and Restart. Methods may be called from any goroutine.
type Server struct {
	Addr string // "127.0.0.1:<Port>"
	Port int
	Dir  string // working directory: logs, nodes.conf, sentinel.conf

	bin    string
	args   []string // complete command line after bin; Restart reuses it as is
	ownDir bool     // Dir was made by this package; Close removes it

	mu     sync.Mutex
	proc   *process      // guarded by mu; nil while not running
	paused bool          // guarded by mu; SIGSTOPped and not yet resumed
	admin  *redis.Client // guarded by mu; created on first use
	closed bool          // guarded by mu; Close has run
}

// StartServer starts a standalone redis-server and waits until it answers
// PING. args are extra command-line options appended after the defaults, so
// they override them, e.g. "--maxmemory", "1mb".
func (e Env) StartServer(args ...string) (*Server, error) {
	return e.start("server", func(port int, dir string) ([]string, error) {
		return append(baseArgs(port, dir), args...), nil
	})
}

// baseArgs is the configuration every data node starts with. Persistence is
// off so that a restart starts empty (apart from cluster state) and stops are
// instant; replication is tuned so that a replica syncs in milliseconds; the
// DEBUG command is allowed from loopback so tests can make a server slow on
// purpose (DEBUG SLEEP).
func baseArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, logName),
		"--save", "",
		"--appendonly", "no",
		// On SIGTERM redis 7 otherwise waits up to 10s for lagging replicas,
		// and a paused replica lags forever.
		"--shutdown-timeout", "0",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		"--repl-ping-replica-period", "1",
		"--enable-debug-command", "local",
	}
}

// start launches a server built by argv on a fresh port and directory,
// trying again with another port if a different process wins the race for
// the chosen one. On error nothing is left running.
func (e Env) start(kind string, argv func(port int, dir string) ([]string, error)) (*Server, error) {
	bin, err := e.bin()
	if err != nil {
		return nil, err
	}
	var taken []string
	for range startAttempts {
		port, err := reservePort()
		if err != nil {
			return nil, err
		}
		dir, owned, err := e.dir()
		if err != nil {
			releasePort(port)
			return nil, fmt.Errorf("redisproc: directory for %s: %w", kind, err)
		}
		s := &Server{
			Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Port:   port,
			Dir:    dir,
			bin:    bin,
			ownDir: owned,
		}
		if e.OnStart != nil {
			e.OnStart(s)
		}
		if s.args, err = argv(port, s.Dir); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("redisproc: preparing %s in %s: %w", kind, s.Dir, err)
		}
		err = s.launch()
		if err == nil {
			return s, nil
		}
		tail := logTail(s.Dir)
		_ = s.Close()
		if !errors.Is(err, errPortTaken) {
			return nil, fmt.Errorf("redisproc: starting %s on %s: %w\n%s", kind, s.Addr, err, tail)
		}
		taken = append(taken, fmt.Sprintf("%s (%v)", s.Addr, err))
	}
	return nil, fmt.Errorf("redisproc: starting %s: every port tried was taken by another process: %s",
		kind, strings.Join(taken, "; "))
}

// launch starts the process and waits until it serves.
func (s *Server) launch() error {
	p, err := spawn(s.bin, s.args, s.Dir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc, s.paused = p, false
	s.mu.Unlock()
	return s.waitServing(p)
}

// waitServing waits until p answers PING on s.Addr.
func (s *Server) waitServing(p *process) error {
	// Wait for the listening socket with a raw dial first: go-redis counts
	// refused dials against its pool (see adminPoolSize), a raw dial costs
	// nothing.
	err := poll(ReadyTimeout, func() error {
		if p.exited() {
			return permanent(s.exitError(p))
		}
		c, err := net.DialTimeout("tcp", s.Addr, adminTimeout)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		return err
	}
	admin := s.Admin()
	return poll(ReadyTimeout, func() error {
		if p.exited() {
			return permanent(s.exitError(p))
		}
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		info, err := infoMap(ctx, admin, "server")
		if err != nil {
			return err
		}
		// Whoever answers must be our process: if another process bound
		// the port first, ours is about to exit with a bind error.
		if got := info["process_id"]; got != strconv.Itoa(p.pid()) {
			return permanent(fmt.Errorf("%w: %s is served by pid %s, not by ours (%d)", errPortTaken, s.Addr, got, p.pid()))
		}
		// PING fails with LOADING until the dataset is in memory.
		return admin.Ping(ctx).Err()
	})
}

func (s *Server) exitError(p *process) error {
	if logMentionsBindFailure(s.Dir) {
		return fmt.Errorf("%w: redis-server exited (%v)", errPortTaken, p.err)
	}
	return fmt.Errorf("redis-server exited before it was ready (%v)", p.err)
}

// Close stops the process (resuming it first if it is paused) and releases
// everything: the admin client, the port reservation and, if this package
// made it, the directory. It is idempotent; the error reports a server that
// had to be killed because it ignored SIGTERM.
func (s *Server) Close() error {
	err := s.halt()
	s.mu.Lock()
	already := s.closed
	admin := s.admin
	s.admin, s.closed = nil, true
	s.mu.Unlock()
	if already {
		// The port may belong to another server by now.
		return err
	}
	if admin != nil {
		_ = admin.Close()
	}
	releasePort(s.Port)
	if s.ownDir {
		if rerr := os.RemoveAll(s.Dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("redisproc: stopping %s: %w", s.Addr, err)
	}
	return nil
}

// halt stops the process cleanly if it is running.
func (s *Server) halt() error {
	s.mu.Lock()
	p := s.proc
	s.proc, s.paused = nil, false
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop()
}

// running returns the live process, or an error: acting on a server that is
// not running is a mistake in the caller.
func (s *Server) running(verb string) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil, fmt.Errorf("redisproc: cannot %s %s: not running", verb, s.Addr)
	}
	return s.proc, nil
}

// Running reports whether the process is running (paused counts as
// running). It turns false after Kill or Stop, and also when the server exits
// on its own (SHUTDOWN, a crash).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Paused reports whether the process is stopped by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Reachable reports whether the server can answer now: running and not
// paused. The package only talks to reachable servers, so that it never
// waits out a timeout or runs into refused dials (see adminPoolSize).
func (s *Server) Reachable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited() && !s.paused
}

// Pause freezes the process with SIGSTOP and returns once it is stopped. The
// socket stays open, so clients connect and then time out, as with a hung
// server. Close resumes it. Pausing a server that is not running is an
// error, as are Resume and Kill.
func (s *Server) Pause() error {
	p, err := s.running("pause")
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	p.signal(sigStop)
	err = poll(ReadyTimeout, func() error {
		stopped, err := isStopped(p.pid())
		if err != nil {
			return permanent(err)
		}
		if !stopped {
			return errors.New("process not stopped yet")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisproc: pausing %s: %w", s.Addr, err)
	}
	return nil
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error {
	p, err := s.running("resume")
	if err != nil {
		return err
	}
	p.signal(sigCont)
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	return nil
}

// Kill ends the process with SIGKILL, like a crash, and waits until it has
// exited. Restart brings it back.
func (s *Server) Kill() error {
	p, err := s.running("kill")
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.proc, s.paused = nil, false
	s.mu.Unlock()
	p.kill()
	return nil
}

// Stop shuts the server down cleanly: SIGCONT in case it is paused, SIGTERM,
// and SIGKILL if it has not exited 5s later, which the error reports.
// Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	if err := s.halt(); err != nil {
		return fmt.Errorf("redisproc: stopping %s: %w", s.Addr, err)
	}
	return nil
}

// Restart starts the server again with the same command line, port and
// directory, stopping it first if it is still running, and waits until it
// answers PING. Without persistence the data is gone, but a cluster node keeps
// its nodes.conf and so rejoins under the same node ID. A replica's
// replication link is not awaited: its primary may be down on purpose; see
// WaitLinkUp. A server cannot be restarted after Close.
func (s *Server) Restart() error {
	stopErr := s.halt()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("redisproc: cannot restart %s after Close", s.Addr)
	}
	if err := s.launch(); err != nil {
		return fmt.Errorf("redisproc: restarting %s: %w\n%s", s.Addr, errors.Join(err, stopErr), logTail(s.Dir))
	}
	return nil
}

func (s *Server) String() string { return s.Addr }
