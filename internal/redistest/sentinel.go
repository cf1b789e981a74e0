package redistest

import (
	"testing"

	"github.com/redisguard/redisguard/internal/redisproc"
)

// Sentinel is a monitored primary/replica pair and the sentinels watching it.
// Master and Replica are the roles at start; after a failover ask
// CurrentMaster.
type Sentinel struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinels  []*Server

	g *redisproc.Sentinel
}

// StartSentinel starts a primary, one replica and three sentinels (quorum 2,
// down-after 1000ms, failover-timeout 3000ms) and waits until every sentinel
// has a working view of the replica and has discovered the two other
// sentinels, which is what a failover needs.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	g, err := env(t).StartSentinel()
	if err != nil {
		t.Fatal(err)
	}
	s := &Sentinel{MasterName: g.MasterName, Master: wrap(g.Master), Replica: wrap(g.Replica), g: g}
	for _, p := range g.Sentinels {
		s.Sentinels = append(s.Sentinels, wrap(p))
	}
	return s
}

// Addrs returns the sentinels' addresses.
func (g *Sentinel) Addrs() []string { return g.g.Addrs() }

// CurrentMaster returns the master address reported by the first reachable
// sentinel (SENTINEL GET-MASTER-ADDR-BY-NAME). Right after a failover the
// sentinels may briefly disagree; WaitMaster waits for all of them.
func (g *Sentinel) CurrentMaster(t testing.TB) string {
	t.Helper()
	addr, err := g.g.CurrentMaster()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// WaitMaster waits until every reachable sentinel reports addr as the master.
func (g *Sentinel) WaitMaster(t testing.TB, addr string) {
	t.Helper()
	if err := g.g.WaitMaster(addr); err != nil {
		t.Fatal(err)
	}
}

// Failover asks a reachable sentinel to fail the master over now (SENTINEL
// FAILOVER), without waiting for it to be detected as down. It returns once
// the failover has started; use WaitMaster to see it finish.
func (g *Sentinel) Failover(t testing.TB) {
	t.Helper()
	if err := g.g.Failover(); err != nil {
		t.Fatal(err)
	}
}
