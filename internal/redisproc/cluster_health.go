package redisproc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

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
func (c *Cluster) WaitHealthy() error {
	return WaitFor(ReadyTimeout, "cluster to become healthy", c.healthy)
}

func (c *Cluster) healthy() error {
	var live []*Server
	for _, n := range c.Nodes() {
		if n.Reachable() {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return errors.New("no reachable node")
	}
	var agreed []redis.ClusterSlot
	for _, n := range live {
		layout, err := c.nodeHealthy(n)
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		if agreed == nil {
			agreed = layout
		} else if a, b := describeLayout(agreed), describeLayout(layout); a != b {
			return fmt.Errorf("nodes disagree on CLUSTER SLOTS: %s sees %s; %s sees %s", live[0].Addr, a, n.Addr, b)
		}
	}
	for _, n := range live {
		switch role := roleIn(agreed, c.ClientAddr(n)); role {
		case "master":
		case "replica":
			if err := n.linkUp(); err != nil {
				return fmt.Errorf("replica %s: %w", n.Addr, err)
			}
		default:
			return fmt.Errorf("%s neither owns slots nor is listed as a replica: %s", n.Addr, describeLayout(agreed))
		}
	}
	return nil
}

// nodeHealthy checks n's own view and returns its slot layout.
func (c *Cluster) nodeHealthy(n *Server) ([]redis.ClusterSlot, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	admin := n.Admin()

	text, err := admin.ClusterInfo(ctx).Result()
	if err != nil {
		return nil, err
	}
	if state := parseInfo(text)["cluster_state"]; state != "ok" {
		return nil, fmt.Errorf("cluster_state:%s", state)
	}

	text, err = admin.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	known := parseClusterNodes(text)
	for s, id := range c.ids {
		e, ok := known[id]
		if !ok {
			return nil, fmt.Errorf("does not know %s (%s)", s.Addr, id)
		}
		if s != n && s.Reachable() && !e.healthy() {
			return nil, fmt.Errorf("sees reachable %s as %s, link %s", s.Addr, strings.Join(e.flags, ","), e.link)
		}
	}

	layout, err := admin.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	covered := 0
	for _, r := range layout {
		covered += r.End - r.Start + 1
	}
	if covered != SlotCount {
		return nil, fmt.Errorf("CLUSTER SLOTS covers %d of %d slots", covered, SlotCount)
	}
	return layout, nil
}

// allMet reports whether every node knows every other one and is linked to
// it; StartCluster needs this before it can attach replicas.
func (c *Cluster) allMet() error {
	for n := range c.ids {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		text, err := n.Admin().ClusterNodes(ctx).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		known := parseClusterNodes(text)
		for s, id := range c.ids {
			if e, ok := known[id]; !ok || (s != n && !e.healthy()) {
				return fmt.Errorf("%s does not know %s yet", n.Addr, s.Addr)
			}
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
type clusterNode struct {
	flags []string
	link  string
}

func (e clusterNode) healthy() bool {
	for _, f := range e.flags {
		switch f {
		case "fail", "fail?", "handshake", "noaddr":
			return false
		}
	}
	return e.link == "connected"
}

// parseClusterNodes returns the entries of CLUSTER NODES by node ID.
func parseClusterNodes(text string) map[string]clusterNode {
	nodes := make(map[string]clusterNode)
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		nodes[f[0]] = clusterNode{flags: strings.Split(f[2], ","), link: f[7]}
	}
	return nodes
}

// roleIn says whether addr is a "master" (first node of a range), a
// "replica" (a later one) or absent ("") in layout.
func roleIn(layout []redis.ClusterSlot, addr string) string {
	role := ""
	for _, r := range layout {
		for i, n := range r.Nodes {
			switch {
			case n.Addr != addr:
			case i == 0:
				return "master"
			default:
				role = "replica"
			}
		}
	}
	return role
}

// describeLayout renders a CLUSTER SLOTS reply canonically (ranges in order,
// replicas sorted), so that two nodes' views can be compared as strings.
func describeLayout(layout []redis.ClusterSlot) string {
	ranges := make([]string, 0, len(layout))
	for _, r := range layout {
		var owner string
		var replicas []string
		for i, n := range r.Nodes {
			if i == 0 {
				owner = n.Addr
			} else {
				replicas = append(replicas, n.Addr)
			}
		}
		slices.Sort(replicas)
		ranges = append(ranges, fmt.Sprintf("%05d-%05d:%s%v", r.Start, r.End, owner, replicas))
	}
	slices.Sort(ranges)
	return strings.Join(ranges, " ")
}
