package redistest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
)

// StartReplica starts a server replicating primary (--replicaof) and waits
// until its replication link is up, i.e. the initial sync has finished and
// writes to primary now reach it. args are appended as in StartServer.
func StartReplica(t testing.TB, primary *Server, args ...string) *Server {
	t.Helper()
	s := start(t, "replica", func(port int, dir string) ([]string, error) {
		a := append(baseArgs(port, dir), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		return append(a, args...), nil
	})
	s.WaitLinkUp(t)
	return s
}

// WaitLinkUp waits until s is a replica whose link to its primary is up
// (master_link_status:up), e.g. after a Restart or a failover.
func (s *Server) WaitLinkUp(t testing.TB) {
	t.Helper()
	WaitFor(t, ReadyTimeout, s.Addr+" replication link up", s.linkUp)
}

func (s *Server) linkUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	info, err := infoMap(ctx, s.Admin(), "replication")
	if err != nil {
		return err
	}
	if info["role"] != "slave" || info["master_link_status"] != "up" {
		return fmt.Errorf("role:%s master_link_status:%q master_sync_in_progress:%s",
			info["role"], info["master_link_status"], info["master_sync_in_progress"])
	}
	return nil
}
