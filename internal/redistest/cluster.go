package redistest

import (
	"testing"

	"github.com/redisguard/redisguard/internal/redisproc"
)

// Defaults for ClusterOptions.
const (
	DefaultClusterMasters     = redisproc.DefaultClusterMasters
	DefaultClusterNodeTimeout = redisproc.DefaultClusterNodeTimeout
)

// ClusterOptions describes the cluster StartCluster builds; see
// redisproc.ClusterOptions for the fields and their defaults.
type ClusterOptions = redisproc.ClusterOptions

// Cluster is a Redis Cluster of separate redis-server processes. Masters and
// Replicas are the roles at start; after a failover ask MasterForSlot.
type Cluster struct {
	Masters []*Server
	// Replicas[i*ReplicasPerMaster+j] replicates Masters[i] at start; with
	// one replica per master, Replicas[i] replicates Masters[i].
	Replicas []*Server

	c      *redisproc.Cluster
	byProc map[*redisproc.Server]*Server
}

// StartCluster starts and joins the nodes, assigns the slots evenly to the
// masters, attaches the replicas, and waits until the cluster is healthy (see
// WaitHealthy).
func StartCluster(t testing.TB, opt ClusterOptions) *Cluster {
	t.Helper()
	pc, err := env(t).StartCluster(opt)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{c: pc, byProc: make(map[*redisproc.Server]*Server)}
	for _, p := range pc.Masters {
		c.Masters = append(c.Masters, c.wrap(p))
	}
	for _, p := range pc.Replicas {
		c.Replicas = append(c.Replicas, c.wrap(p))
	}
	return c
}

func (c *Cluster) wrap(p *redisproc.Server) *Server {
	s := wrap(p)
	c.byProc[p] = s
	return s
}

// Nodes returns every node, masters first, in start order.
func (c *Cluster) Nodes() []*Server {
	return append(append([]*Server(nil), c.Masters...), c.Replicas...)
}

// Addrs returns every node's address, in the order of Nodes.
func (c *Cluster) Addrs() []string { return c.c.Addrs() }

// ClientAddr returns the address the cluster gives clients for s, in
// CLUSTER SLOTS and in redirects: the one it announces with
// ClusterOptions.Announce, else s.Addr.
func (c *Cluster) ClientAddr(s *Server) string { return c.c.ClientAddr(s.p) }

// ClientAddrs returns every node's ClientAddr, in the order of Nodes: the
// seeds for a client that must reach the nodes where they announce.
func (c *Cluster) ClientAddrs() []string { return c.c.ClientAddrs() }

// NodeID returns s's cluster node ID, which survives Kill and Restart.
func (c *Cluster) NodeID(t testing.TB, s *Server) string {
	t.Helper()
	id, err := c.c.NodeID(s.p)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// WaitHealthy waits until the cluster has settled, as seen by every
// reachable node (running and not paused; the others cannot answer):
//   - cluster_state:ok, so every slot is served (full coverage is required);
//   - it knows every node of the cluster, and none of the reachable ones is
//     flagged failing, in handshake or disconnected;
//   - all of them report the same CLUSTER SLOTS layout;
//   - in that layout, every reachable node either owns slots or is listed as
//     a replica, and each replica's link to its master is up.
//
// Call it after StartCluster (which does), and after failovers, restarts or
// resumes, before relying on the topology.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	if err := c.c.WaitHealthy(); err != nil {
		t.Fatal(err)
	}
}

// MasterForSlot returns the node that owns slot according to CLUSTER SLOTS
// on the first reachable node.
func (c *Cluster) MasterForSlot(t testing.TB, slot int) *Server {
	t.Helper()
	p, err := c.c.MasterForSlot(slot)
	if err != nil {
		t.Fatal(err)
	}
	return c.byProc[p]
}

// KeyOn returns a key, prefix followed by a number, whose slot s currently
// owns. It fails the test if s owns no slot.
func (c *Cluster) KeyOn(t testing.TB, s *Server, prefix string) string {
	t.Helper()
	key, err := c.c.KeyOn(s.p, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return key
}
