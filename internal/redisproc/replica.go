package redisproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// StartReplica starts a server replicating primary (--replicaof) and waits
// until its replication link is up, i.e. the initial sync has finished and
// writes to primary now reach it. args are appended as in StartServer.
func (e Env) StartReplica(primary *Server, args ...string) (*Server, error) {
	s, err := e.start("replica", func(port int, dir string) ([]string, error) {
		a := append(baseArgs(port, dir), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		return append(a, args...), nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.WaitLinkUp(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// WaitLinkUp waits until s is a replica whose link to its primary is up
// (master_link_status:up), e.g. after a Restart or a failover.
func (s *Server) WaitLinkUp() error {
	return WaitFor(ReadyTimeout, s.Addr+" replication link up", s.linkUp)
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
