package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel group settings. Detection and failover are tuned to take seconds,
// not the production default of a minute, so that tests can watch a failover.
const (
	sentinelCount           = 3
	sentinelQuorum          = 2
	sentinelDownAfterMillis = 1000
	// sentinelFailoverTimeoutMillis also spaces out repeated failovers of
	// the same master (twice this value), so it is kept small.
	sentinelFailoverTimeoutMillis = 3000
	sentinelMasterName            = "mymaster"
	sentinelConfName              = "sentinel.conf"
)

// Sentinel is a monitored primary/replica pair and the sentinels watching it.
// Master and Replica are the roles at start; after a failover ask
// CurrentMaster.
type Sentinel struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinels  []*Server
}

// StartSentinel starts a primary, one replica and three sentinels (quorum 2,
// down-after 1000ms, failover-timeout 3000ms) and waits until every sentinel
// has a working view of the replica and has discovered the two other
// sentinels, which is what a failover needs. On error nothing is left
// running.
func (e Env) StartSentinel() (g *Sentinel, err error) {
	g = &Sentinel{MasterName: sentinelMasterName}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.Close())
			g = nil
		}
	}()
	if g.Master, err = e.StartServer(); err != nil {
		return g, err
	}
	if g.Replica, err = e.StartReplica(g.Master); err != nil {
		return g, err
	}
	for range sentinelCount {
		s, err := e.start("sentinel", g.sentinelArgs)
		if err != nil {
			return g, err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	err = WaitFor(ReadyTimeout, "sentinels to discover the replica and each other", func() error {
		for _, s := range g.Sentinels {
			if err := g.discovered(s); err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr, err)
			}
		}
		return nil
	})
	return g, err
}

// Close stops every process of the group.
func (g *Sentinel) Close() error {
	var errs []error
	for _, s := range append([]*Server{g.Master, g.Replica}, g.Sentinels...) {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	return errors.Join(errs...)
}

// sentinelArgs writes the sentinel's config file: sentinels refuse to start
// without a writable one, because they persist what they learn into it.
func (g *Sentinel) sentinelArgs(port int, dir string) ([]string, error) {
	name := g.MasterName
	conf := strings.Join([]string{
		fmt.Sprintf("port %d", port),
		"bind 127.0.0.1",
		"protected-mode no",
		"daemonize no",
		fmt.Sprintf("dir %q", dir),
		fmt.Sprintf("logfile %q", filepath.Join(dir, logName)),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", name, g.Master.Port, sentinelQuorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, sentinelDownAfterMillis),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, sentinelFailoverTimeoutMillis),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	}, "\n") + "\n"
	path := filepath.Join(dir, sentinelConfName)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return []string{path, "--sentinel"}, nil
}

// discovered checks that s sees the replica with a healthy link (it has read
// the replica's INFO, so the replica is electable) and both other sentinels.
func (g *Sentinel) discovered(s *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	admin := s.Admin()

	replicas := redis.NewMapStringStringSliceCmd(ctx, "sentinel", "replicas", g.MasterName)
	if err := admin.Process(ctx, replicas); err != nil {
		return err
	}
	ok := slices.ContainsFunc(replicas.Val(), func(r map[string]string) bool {
		return net.JoinHostPort(r["ip"], r["port"]) == g.Replica.Addr &&
			r["master-link-status"] == "ok" && healthyFlags(r["flags"])
	})
	if !ok {
		return fmt.Errorf("replica %s not seen healthy; replicas: %v", g.Replica.Addr, replicas.Val())
	}

	peers := redis.NewMapStringStringSliceCmd(ctx, "sentinel", "sentinels", g.MasterName)
	if err := admin.Process(ctx, peers); err != nil {
		return err
	}
	var seen []string
	for _, p := range peers.Val() {
		if healthyFlags(p["flags"]) {
			seen = append(seen, net.JoinHostPort(p["ip"], p["port"]))
		}
	}
	for _, other := range g.Sentinels {
		if other != s && !slices.Contains(seen, other.Addr) {
			return fmt.Errorf("sentinel %s not discovered; sees %v", other.Addr, seen)
		}
	}
	return nil
}

// healthyFlags reports whether a sentinel's flags for an instance say it is
// reachable.
func healthyFlags(flags string) bool {
	for f := range strings.SplitSeq(flags, ",") {
		switch f {
		case "s_down", "o_down", "disconnected":
			return false
		}
	}
	return true
}

// Addrs returns the sentinels' addresses.
func (g *Sentinel) Addrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// CurrentMaster returns the master address reported by the first reachable
// sentinel (SENTINEL GET-MASTER-ADDR-BY-NAME). Right after a failover the
// sentinels may briefly disagree; WaitMaster waits for all of them.
func (g *Sentinel) CurrentMaster() (string, error) {
	for _, s := range g.Sentinels {
		if !s.Reachable() {
			continue
		}
		addr, err := g.masterAddr(s)
		if err != nil {
			return "", fmt.Errorf("redisproc: sentinel %s: %w", s.Addr, err)
		}
		return addr, nil
	}
	return "", fmt.Errorf("redisproc: no reachable sentinel among %v", g.Addrs())
}

// WaitMaster waits until every reachable sentinel reports addr as the master.
func (g *Sentinel) WaitMaster(addr string) error {
	return WaitFor(ReadyTimeout, "sentinels to agree the master is "+addr, func() error {
		asked := 0
		for _, s := range g.Sentinels {
			if !s.Reachable() {
				continue
			}
			asked++
			got, err := g.masterAddr(s)
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", s.Addr, err)
			}
			if got != addr {
				return fmt.Errorf("sentinel %s reports %s", s.Addr, got)
			}
		}
		if asked == 0 {
			return errors.New("no reachable sentinel")
		}
		return nil
	})
}

// Failover asks a reachable sentinel to fail the master over now (SENTINEL
// FAILOVER), without waiting for it to be detected as down. It returns once
// the failover has started; use WaitMaster to see it finish.
func (g *Sentinel) Failover() error {
	for _, s := range g.Sentinels {
		if !s.Reachable() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		cmd := redis.NewStatusCmd(ctx, "sentinel", "failover", g.MasterName)
		if err := s.Admin().Process(ctx, cmd); err != nil {
			return fmt.Errorf("redisproc: SENTINEL FAILOVER on %s: %w", s.Addr, err)
		}
		return nil
	}
	return fmt.Errorf("redisproc: no reachable sentinel among %v", g.Addrs())
}

func (g *Sentinel) masterAddr(s *Server) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	cmd := redis.NewStringSliceCmd(ctx, "sentinel", "get-master-addr-by-name", g.MasterName)
	if err := s.Admin().Process(ctx, cmd); err != nil {
		return "", err
	}
	if v := cmd.Val(); len(v) == 2 {
		return net.JoinHostPort(v[0], v[1]), nil
	}
	return "", fmt.Errorf("unexpected GET-MASTER-ADDR-BY-NAME reply %q", cmd.Val())
}
