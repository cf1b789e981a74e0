package redisguard

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/redisguard/redisguard/internal/breaker"
)

// maxViews is how many nodes are asked for their view of a slot: enough for
// a majority between two claimants, few enough to stay cheap.
const maxViews = 3

// slotView is one node's opinion of who owns a slot (see divergence.go).
type slotView struct {
	from      string // address of the node asked
	owner     string // node ID it names as owner; "" when it knows none
	ownerAddr string
	epoch     uint64 // that owner's configEpoch, as the node asked knows it
	reachable bool   // the owner answered within the read timeout
}

// gatherViews asks up to maxViews nodes, in parallel, who owns slot, and
// checks that each owner named answers. It uses the cluster client's own
// node clients, so breakers, pools and credentials apply; nodes whose
// breaker is not closed are skipped. Everything is bounded by one
// ReadTimeout, and every goroutine has finished when it returns. A node that
// does not answer gives no view, and once a node has refused CLUSTER NODES,
// none is asked again. target is the address the last redirect pointed to:
// it claims something, so it is asked first.
func (d *divergence) gatherViews(ctx context.Context, slot int, target string) []slotView {
	if d.nodesAsk.refused() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.k.cfg.ReadTimeout)
	defer cancel()
	clients := d.nodeClients(ctx)
	asked := d.viewCandidates(slot, target, clients)
	views := make([]slotView, len(asked))
	got := make([]bool, len(asked))
	var g errgroup.Group
	for i, addr := range asked {
		g.Go(func() error {
			text, err := clients[addr].ClusterNodes(ctx).Result()
			if err != nil {
				d.nodesAsk.refusedBy(d.k, viewsQuestion, addr, err)
				return nil
			}
			v, self, ok := viewOf(addr, text, slot)
			if !ok {
				return nil
			}
			// A node naming itself has just answered; any other owner is
			// pinged from this goroutine, so a slow node delays only its
			// own view.
			v.reachable = self || (v.owner != "" && d.answers(ctx, clients, v.ownerAddr))
			views[i], got[i] = v, true
			return nil
		})
	}
	_ = g.Wait() // the goroutines never fail; a missing view is the failure
	out := views[:0]
	for i, v := range views {
		if got[i] {
			out = append(out, v)
		}
	}
	return out
}

// viewsQuestion is CLUSTER NODES, as its refusal is logged.
var viewsQuestion = question{"cluster|nodes",
	"a redirect cycle is waited out as a failover, at most ClusterNodeTimeout, without the nodes' views of who owns the slot"}

// nodeClients returns the ordinary cluster client's node clients by
// address. ForEachShard is the exported way to reach them; its callbacks
// only record.
func (d *divergence) nodeClients(ctx context.Context) map[string]*redis.Client {
	if d.topo == nil {
		return nil
	}
	cc := d.topo.ordinaryClient()
	if cc == nil {
		return nil
	}
	var mu sync.Mutex
	m := make(map[string]*redis.Client)
	_ = cc.ForEachShard(ctx, func(_ context.Context, cl *redis.Client) error {
		mu.Lock()
		m[cl.Options().Addr] = cl
		mu.Unlock()
		return nil
	})
	return m
}

// viewCandidates orders the nodes worth asking: the redirect's target, the
// slot's owner in the last map, the other masters, then replicas; it keeps
// the first maxViews that have a client and a closed breaker (a half-open
// node's single probe is not spent on this).
func (d *divergence) viewCandidates(slot int, target string, clients map[string]*redis.Client) []string {
	order := []string{target}
	view := d.topo.slotMap()
	if owner := view.Owner(slot); owner != "" {
		order = append(order, owner)
	}
	order = append(order, view.Masters()...)
	for _, addr := range view.Nodes() {
		if !view.IsMaster(addr) {
			order = append(order, addr)
		}
	}
	rest := make([]string, 0, len(clients))
	for addr := range clients {
		rest = append(rest, addr)
	}
	slices.Sort(rest) // map order is random; the choice should not be
	order = append(order, rest...)

	var out []string
	for _, addr := range order {
		if len(out) == maxViews {
			break
		}
		if _, ok := clients[addr]; !ok || slices.Contains(out, addr) {
			continue
		}
		if d.nodes.get(addr).br.State() != breaker.Closed {
			continue
		}
		out = append(out, addr)
	}
	return out
}

// answers reports whether the node at addr answers PING before ctx ends.
//
// An unreachable top claimant raises ErrClusterFailover at once while a
// reachable one only makes the command wait (at most ClusterNodeTimeout), so
// doubt counts as reachable: a full pool means our connections to the node
// are busy, not that it is gone. An open breaker fails the PING at once,
// which is right: the node has been failing.
func (d *divergence) answers(ctx context.Context, clients map[string]*redis.Client, addr string) bool {
	var err error
	if cl, ok := clients[addr]; ok {
		err = cl.Process(ctx, ownCmd{redis.NewCmd(ctx, "ping")})
	} else {
		// Named by some node but absent from our map (e.g. a failed node
		// CLUSTER SLOTS leaves out): one PING on a connection of its own,
		// as a recovery probe is sent.
		_, err = probeAddr(ctx, d.probe, addr, d.k.cfg.ReadTimeout, "ping")
	}
	return err == nil || isRedisReply(err) || errors.Is(err, ErrPoolExhausted)
}

// viewOf reads from's view of slot out of its CLUSTER NODES reply, one line
// per node:
//
//	<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
//
// where a slot entry is "n", "lo-hi", or a bracketed migration marker
// ("[n->-id]", "[n-<-id]") that does not change ownership. self reports
// whether the owner is the node that answered. ok is false when text has no
// node line at all.
func viewOf(from, text string, slot int) (v slotView, self, ok bool) {
	v.from = from
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		ok = true
		if !ownsSlot(f[8:], slot) {
			continue
		}
		epoch, err := strconv.ParseUint(f[6], 10, 64)
		if err != nil {
			continue // a malformed line claims nothing
		}
		addr, _, _ := strings.Cut(f[1], "@")
		v.owner, v.ownerAddr, v.epoch = f[0], addr, epoch
		self = slices.Contains(strings.Split(f[2], ","), "myself")
	}
	return v, self, ok
}

// ownsSlot reports whether the slot entries of a CLUSTER NODES line cover slot.
func ownsSlot(entries []string, slot int) bool {
	for _, e := range entries {
		if strings.HasPrefix(e, "[") {
			continue
		}
		lo, hi, isRange := strings.Cut(e, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		if a <= slot && slot <= b {
			return true
		}
	}
	return false
}
