package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for ClusterOptions.
const (
	DefaultClusterMasters     = 3
	DefaultClusterNodeTimeout = 2 * time.Second
)

// ClusterOptions describes the cluster StartCluster builds.
type ClusterOptions struct {
	// Masters is the number of primaries; the slots are split evenly
	// between them in order. default: 3
	Masters int
	// ReplicasPerMaster is the number of replicas each primary gets.
	// default: 0
	ReplicasPerMaster int
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it is flagged as failing and its replica takes
	// over. default: 2s
	NodeTimeout time.Duration
	// Args are extra redis-server options for every node, appended after
	// the defaults so that they override them. default: none
	Args []string
	// Announce, if set, is called with a node's port before the node
	// starts (again, with the new port, if the start is retried on another
	// one) and returns the client port the node announces instead
	// (cluster-announce-port, with cluster-announce-ip 127.0.0.1): the port
	// CLUSTER SLOTS, CLUSTER NODES, MOVED and ASK name, e.g. that of a proxy
	// in front of the node. The node still listens on its own port, where
	// the admin clients reach it, and announces its own cluster bus port
	// (cluster-announce-bus-port), so the nodes talk to each other
	// directly. default: nil, each node announces its own port
	Announce func(port int) int
}

func (o ClusterOptions) withDefaults() ClusterOptions {
	if o.Masters <= 0 {
		o.Masters = DefaultClusterMasters
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = DefaultClusterNodeTimeout
	}
	return o
}

// Cluster is a Redis Cluster of separate redis-server processes. Masters and
// Replicas are the roles at start; after a failover ask MasterForSlot.
type Cluster struct {
	Masters []*Server
	// Replicas[i*ReplicasPerMaster+j] replicates Masters[i] at start; with
	// one replica per master, Replicas[i] replicates Masters[i].
	Replicas []*Server

	opt ClusterOptions
	// ids holds every node's ID. Written only by StartCluster; nodes.conf
	// keeps IDs stable across Kill and Restart.
	ids map[*Server]string
	// announced holds the address each node announces, for nodes that
	// announce another port than their own (ClusterOptions.Announce).
	// Written only by StartCluster; Restart keeps the command line.
	announced map[*Server]string
}

// StartCluster starts and joins the nodes, assigns the slots evenly to the
// masters, attaches the replicas, and waits until the cluster is healthy (see
// WaitHealthy). On error nothing is left running.
func (e Env) StartCluster(opt ClusterOptions) (c *Cluster, err error) {
	opt = opt.withDefaults()
	if opt.ReplicasPerMaster < 0 {
		return nil, fmt.Errorf("redisproc: negative ReplicasPerMaster %d", opt.ReplicasPerMaster)
	}
	c = &Cluster{opt: opt, ids: make(map[*Server]string), announced: make(map[*Server]string)}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
			c = nil
		}
	}()
	announce := make(map[int]int) // a node's port -> the client port it announces
	args := func(port int, dir string) ([]string, error) {
		a := baseArgs(port, dir)
		if opt.Announce != nil {
			to := opt.Announce(port)
			if to <= 0 || to > 65535 {
				return nil, fmt.Errorf("redisproc: Announce(%d) = %d, not a port", port, to)
			}
			announce[port] = to
			a = append(a,
				"--cluster-announce-ip", "127.0.0.1",
				"--cluster-announce-port", strconv.Itoa(to),
				"--cluster-announce-bus-port", strconv.Itoa(port+busOffset),
			)
		}
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to --dir
			"--cluster-node-timeout", strconv.FormatInt(opt.NodeTimeout.Milliseconds(), 10),
			// Explicit although it is redis's default: cluster_state:ok
			// then means every slot is served, which is what tests check.
			"--cluster-require-full-coverage", "yes",
			// A replica may take over however long its master has been
			// unreachable: tests pause masters for arbitrary times.
			"--cluster-replica-validity-factor", "0",
			// Replicas stay with the master StartCluster gave them, so
			// tests can rely on the layout.
			"--cluster-allow-replica-migration", "no",
		)
		return append(a, opt.Args...), nil
	}
	for range opt.Masters {
		m, err := e.start("cluster master", args)
		if err != nil {
			return c, err
		}
		c.Masters = append(c.Masters, m)
	}
	for range opt.Masters * opt.ReplicasPerMaster {
		r, err := e.start("cluster replica", args)
		if err != nil {
			return c, err
		}
		c.Replicas = append(c.Replicas, r)
	}
	for _, n := range c.Nodes() {
		if to, ok := announce[n.Port]; ok {
			c.announced[n] = net.JoinHostPort("127.0.0.1", strconv.Itoa(to))
		}
	}

	for _, n := range c.Nodes() {
		err := n.do("CLUSTER MYID", func(ctx context.Context, a *redis.Client) error {
			id, err := a.ClusterMyID(ctx).Result()
			c.ids[n] = id
			return err
		})
		if err != nil {
			return c, err
		}
	}
	for i, m := range c.Masters {
		lo, hi := i*SlotCount/opt.Masters, (i+1)*SlotCount/opt.Masters-1
		err := m.do("CLUSTER SET-CONFIG-EPOCH and ADDSLOTSRANGE", func(ctx context.Context, a *redis.Client) error {
			// Distinct epochs spare the nodes the epoch-collision
			// protocol, which would otherwise slow convergence down.
			if err := a.Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
				return err
			}
			return a.ClusterAddSlotsRange(ctx, lo, hi).Err()
		})
		if err != nil {
			return c, err
		}
	}
	// Every node meets every other itself: one that meets only the first
	// learns of the rest by gossip, a second or two later.
	nodes := c.Nodes()
	for i, from := range nodes {
		for _, n := range nodes[i+1:] {
			err := from.do("CLUSTER MEET "+n.Addr, func(ctx context.Context, a *redis.Client) error {
				return a.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.Port)).Err()
			})
			if err != nil {
				return c, err
			}
		}
	}
	// CLUSTER REPLICATE needs the replica to know its master already.
	if err := WaitFor(ReadyTimeout, "cluster nodes to meet", c.allMet); err != nil {
		return c, err
	}
	for i, r := range c.Replicas {
		id := c.ids[c.Masters[i/opt.ReplicasPerMaster]]
		err := r.do("CLUSTER REPLICATE "+id, func(ctx context.Context, a *redis.Client) error {
			return a.ClusterReplicate(ctx, id).Err()
		})
		if err != nil {
			return c, err
		}
	}
	return c, c.WaitHealthy()
}

// Close stops every node of the cluster.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes() {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// do runs one admin command with the admin timeout.
func (s *Server) do(what string, f func(context.Context, *redis.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := f(ctx, s.Admin()); err != nil {
		return fmt.Errorf("redisproc: %s on %s: %w", what, s.Addr, err)
	}
	return nil
}

// Nodes returns every node, masters first, in start order.
func (c *Cluster) Nodes() []*Server {
	return append(append([]*Server(nil), c.Masters...), c.Replicas...)
}

// Addrs returns every node's address, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, n.Addr)
	}
	return addrs
}

// Node returns the node listening on addr, or announcing it (see
// ClientAddr), or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes() {
		if n.Addr == addr || c.ClientAddr(n) == addr {
			return n
		}
	}
	return nil
}

// ClientAddr returns the address the cluster gives clients for s, in
// CLUSTER SLOTS and in redirects: the one it announces with
// ClusterOptions.Announce, else s.Addr.
func (c *Cluster) ClientAddr(s *Server) string {
	if a, ok := c.announced[s]; ok {
		return a
	}
	return s.Addr
}

// ClientAddrs returns every node's ClientAddr, in the order of Nodes.
func (c *Cluster) ClientAddrs() []string {
	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, c.ClientAddr(n))
	}
	return addrs
}

// NodeID returns s's cluster node ID, which survives Kill and Restart.
func (c *Cluster) NodeID(s *Server) (string, error) {
	id, ok := c.ids[s]
	if !ok {
		return "", fmt.Errorf("redisproc: %v is not a node of this cluster", s)
	}
	return id, nil
}

// MasterForSlot returns the node that owns slot according to CLUSTER SLOTS
// on the first reachable node.
func (c *Cluster) MasterForSlot(slot int) (*Server, error) {
	if slot < 0 || slot >= SlotCount {
		return nil, fmt.Errorf("redisproc: slot %d out of range", slot)
	}
	owners, err := c.SlotOwners()
	if err != nil {
		return nil, err
	}
	n := c.Node(owners[slot])
	if n == nil {
		return nil, fmt.Errorf("redisproc: slot %d is served by %q, which is not a node of this cluster", slot, owners[slot])
	}
	return n, nil
}

// KeyOn returns a key, prefix followed by a number, whose slot s currently
// owns, or an error if s owns no slot.
func (c *Cluster) KeyOn(s *Server, prefix string) (string, error) {
	owners, err := c.SlotOwners()
	if err != nil {
		return "", err
	}
	// With every master owning a sizeable share of the slots the first few
	// candidates almost always hit; the bound only catches a server that
	// owns nothing or a prefix with a {hashtag} pinning every key elsewhere.
	for i := range 1 << 16 {
		key := prefix + strconv.Itoa(i)
		if owners[Slot(key)] == c.ClientAddr(s) {
			return key, nil
		}
	}
	return "", fmt.Errorf("redisproc: no key with prefix %q maps to a slot owned by %v", prefix, s)
}

// SlotOwners maps each slot to its master's address, as the first reachable
// node that answers CLUSTER SLOTS sees it: the address the master announces
// (ClientAddr).
func (c *Cluster) SlotOwners() (*[SlotCount]string, error) {
	var errs []error
	for _, n := range c.Nodes() {
		if !n.Reachable() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		slots, err := n.Admin().ClusterSlots(ctx).Result()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Addr, err))
			continue
		}
		var owners [SlotCount]string
		for _, r := range slots {
			for s := max(r.Start, 0); s <= min(r.End, SlotCount-1) && len(r.Nodes) > 0; s++ {
				owners[s] = r.Nodes[0].Addr
			}
		}
		return &owners, nil
	}
	return nil, fmt.Errorf("redisproc: no reachable cluster node answered CLUSTER SLOTS: %w", errors.Join(errs...))
}
