package redistest

import "testing"

// StartReplica starts a server replicating primary (--replicaof) and waits
// until its replication link is up, i.e. the initial sync has finished and
// writes to primary now reach it. args are appended as in StartServer.
func StartReplica(t testing.TB, primary *Server, args ...string) *Server {
	t.Helper()
	s, err := env(t).StartReplica(primary.p, args...)
	if err != nil {
		t.Fatal(err)
	}
	return wrap(s)
}

// WaitLinkUp waits until s is a replica whose link to its primary is up
// (master_link_status:up), e.g. after a Restart or a failover.
func (s *Server) WaitLinkUp(t testing.TB) {
	t.Helper()
	if err := s.p.WaitLinkUp(); err != nil {
		t.Fatal(err)
	}
}
