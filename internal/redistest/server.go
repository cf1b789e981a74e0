package redistest

import (
	"testing"

	"github.com/redisguard/redisguard/internal/redisproc"
)

// Server is one redis-server process (plain, replica, cluster node or
// sentinel). Its address, port and directory never change, including across
// Kill and Restart. Methods may be called from any goroutine.
type Server struct {
	Addr string // "127.0.0.1:<Port>"
	Port int
	Dir  string // working directory: logs, nodes.conf, sentinel.conf

	p *redisproc.Server
}

func wrap(p *redisproc.Server) *Server {
	return &Server{Addr: p.Addr, Port: p.Port, Dir: p.Dir, p: p}
}

// env is where a test's servers come from: directories from t.TempDir, and
// each server's Close registered with t.Cleanup before its process starts,
// so that no failure path can leave it running. Cleanups run last-in
// first-out, so every server stops before its directory is removed.
func env(t testing.TB) redisproc.Env {
	t.Helper()
	return redisproc.Env{
		Bin:     Binary(t),
		TempDir: func() (string, error) { return t.TempDir(), nil },
		OnStart: func(s *redisproc.Server) {
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Logf("redistest: %v", err)
				}
			})
		},
	}
}

// StartServer starts a standalone redis-server and waits until it answers
// PING. args are extra command-line options appended after the defaults, so
// they override them, e.g. "--maxmemory", "1mb".
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := env(t).StartServer(args...)
	if err != nil {
		t.Fatal(err)
	}
	return wrap(s)
}

// Running reports whether the process is running (paused counts as
// running). It turns false after Kill or Stop, and also when the server exits
// on its own (SHUTDOWN, a crash).
func (s *Server) Running() bool { return s.p.Running() }

// Paused reports whether the process is stopped by Pause.
func (s *Server) Paused() bool { return s.p.Paused() }

// Pause freezes the process with SIGSTOP and returns once it is stopped. The
// socket stays open, so clients connect and then time out, as with a hung
// server. Cleanup resumes it. Pausing a server that is not running fails the
// test, as do Resume and Kill.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.p.Pause(); err != nil {
		t.Fatal(err)
	}
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.p.Resume(); err != nil {
		t.Fatal(err)
	}
}

// Kill ends the process with SIGKILL, like a crash, and waits until it has
// exited. Restart brings it back.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.p.Kill(); err != nil {
		t.Fatal(err)
	}
}

// Stop shuts the server down cleanly: SIGCONT in case it is paused, SIGTERM,
// and SIGKILL if it has not exited 5s later. Stopping a stopped server does
// nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.p.Stop(); err != nil {
		t.Logf("redistest: %v", err)
	}
}

// Restart starts the server again with the same command line, port and
// directory, stopping it first if it is still running, and waits until it
// answers PING. Without persistence the data is gone, but a cluster node keeps
// its nodes.conf and so rejoins under the same node ID. A replica's
// replication link is not awaited: its primary may be down on purpose; see
// WaitLinkUp.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t) // a server that had to be killed is worth a log line, not a failure
	if err := s.p.Restart(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) String() string { return s.Addr }
