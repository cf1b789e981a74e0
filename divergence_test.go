package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/clock"
	"github.com/redisguard/redisguard/internal/redistest"
)

var divEpoch = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

// view builds a synthetic view: from asks, owner ("" for none) at epoch.
func view(from, owner string, epoch uint64, reachable bool) slotView {
	v := slotView{from: from, owner: owner, epoch: epoch, reachable: reachable}
	if owner != "" {
		v.ownerAddr = "10.0.0." + owner + ":6379"
	}
	return v
}

func TestDecide(t *testing.T) {
	const nt = time.Second
	tests := []struct {
		name        string
		views       []slotView
		elapsed     time.Duration // fake clock advance since the first cycle
		nodeTimeout time.Duration
		want        verdict
		reason      reason
		backoff     time.Duration // checked when want is converging
	}{
		{
			name:  "views agree: the client's map is wrong",
			views: []slotView{view("x", "A", 1, true), view("y", "A", 1, true), view("z", "A", 1, true)},
			want:  corruption, reason: viewsAgree,
		},
		{
			name:  "views agree on an owner that does not answer: still never a failover",
			views: []slotView{view("x", "A", 1, false), view("y", "A", 1, false)},
			want:  corruption, reason: viewsAgree,
		},
		{
			name:  "views agree on the owner but not its epoch (gossip lag): agreement",
			views: []slotView{view("x", "A", 1, true), view("y", "A", 3, true)},
			want:  corruption, reason: viewsAgree,
		},
		{
			name:  "disagree, highest-epoch claimant reachable: converging, first back-off",
			views: []slotView{view("x", "A", 1, true), view("y", "B", 2, true), view("z", "A", 1, true)},
			want:  converging, reason: viewsDisagree, backoff: 2 * minDivergence,
			elapsed: 5 * time.Millisecond,
		},
		{
			name:    "disagree: back-off is twice the observed divergence",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: 100 * time.Millisecond,
			want:    converging, reason: viewsDisagree, backoff: 200 * time.Millisecond,
		},
		{
			name:    "disagree: back-off never reaches past ClusterNodeTimeout since the first cycle",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: 700 * time.Millisecond,
			want:    converging, reason: viewsDisagree, backoff: 300 * time.Millisecond,
		},
		{
			name:        "disagree: back-off capped by ClusterNodeTimeout",
			views:       []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed:     3 * time.Second,
			nodeTimeout: 15 * time.Second,
			want:        converging, reason: viewsDisagree, backoff: 6 * time.Second,
		},
		{
			name:  "disagree, the lower-epoch claimant is unreachable: converging",
			views: []slotView{view("x", "A", 1, false), view("y", "B", 2, true)},
			want:  converging, reason: viewsDisagree, backoff: 2 * minDivergence,
			elapsed: 0,
		},
		{
			name:  "disagree, highest-epoch claimant unreachable: failover at once",
			views: []slotView{view("x", "A", 1, true), view("y", "B", 2, false), view("z", "A", 1, true)},
			want:  failover, reason: claimantUnreachable,
		},
		{
			name:    "disagree just before ClusterNodeTimeout: still converging",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: nt - time.Millisecond,
			want:    converging, reason: viewsDisagree, backoff: time.Millisecond,
		},
		{
			name:    "disagree at ClusterNodeTimeout: failover",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: nt,
			want:    failover, reason: notConverged,
		},
		{
			name:    "disagree long after ClusterNodeTimeout: failover",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: time.Hour,
			want:    failover, reason: notConverged,
		},
		{
			name:  "equal epochs on different owners, one answers: converging (collision)",
			views: []slotView{view("x", "A", 2, false), view("y", "B", 2, true)},
			want:  converging, reason: viewsDisagree, backoff: 2 * minDivergence,
		},
		{
			name:  "equal epochs on different owners, none answers: failover",
			views: []slotView{view("x", "A", 2, false), view("y", "B", 2, false)},
			want:  failover, reason: claimantUnreachable,
		},
		{
			name:  "one node knows no owner, the other names a reachable one: converging",
			views: []slotView{view("x", "", 0, false), view("y", "A", 0, true)},
			want:  converging, reason: viewsDisagree, backoff: 2 * minDivergence,
		},
		{
			name:  "one node knows no owner, the other names an unreachable one: failover",
			views: []slotView{view("x", "", 0, false), view("y", "A", 5, false)},
			want:  failover, reason: claimantUnreachable,
		},
		{
			name:  "no views yet: wait, no evidence of a failover",
			views: nil,
			want:  converging, reason: noViews, backoff: 2 * minDivergence,
		},
		{
			name:    "no views by ClusterNodeTimeout: failover",
			views:   []slotView{},
			elapsed: nt,
			want:    failover, reason: noViews,
		},
		{
			name:  "a single view cannot disagree with itself",
			views: []slotView{view("x", "B", 7, true)},
			want:  corruption, reason: viewsAgree,
		},
		{
			name:    "a single view long after ClusterNodeTimeout: still not a failover",
			views:   []slotView{view("x", "B", 7, false)},
			elapsed: time.Hour,
			want:    corruption, reason: viewsAgree,
		},
		{
			name:  "a single view naming no owner",
			views: []slotView{view("x", "", 0, false)},
			want:  corruption, reason: viewsAgree,
		},
		{
			name:    "clock stepped back before the first cycle: counts as no time",
			views:   []slotView{view("x", "A", 1, true), view("y", "B", 2, true)},
			elapsed: -time.Minute,
			want:    converging, reason: viewsDisagree, backoff: 2 * minDivergence,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodeTimeout := tt.nodeTimeout
			if nodeTimeout == 0 {
				nodeTimeout = nt
			}
			clk := clock.NewFake(divEpoch)
			first := clk.Now()
			clk.Advance(tt.elapsed)
			got := decide(tt.views, first, clk.Now(), nodeTimeout)
			assert.Equal(t, tt.want, got.verdict, "verdict")
			assert.Equal(t, tt.reason, got.reason, "reason")
			if tt.want == converging {
				assert.Equal(t, tt.backoff, got.backoff, "backoff")
			} else {
				assert.Zero(t, got.backoff, "a raise carries no back-off")
			}
		})
	}
}

// The back-off sequence a command sees on a slot that never converges: it
// grows with the divergence, ends exactly at ClusterNodeTimeout, and the
// decision there is final.
func TestDecideBackoffSchedule(t *testing.T) {
	const nt = time.Second
	views := []slotView{view("x", "A", 1, true), view("y", "B", 2, true)}
	clk := clock.NewFake(divEpoch)
	first := clk.Now()
	var waits []time.Duration
	for range 100 {
		d := decide(views, first, clk.Now(), nt)
		if d.verdict != converging {
			assert.Equal(t, failover, d.verdict)
			break
		}
		waits = append(waits, d.backoff)
		clk.Advance(d.backoff)
	}
	assert.Equal(t, []time.Duration{40 * time.Millisecond, 80 * time.Millisecond, 240 * time.Millisecond, 640 * time.Millisecond},
		waits)
	assert.Equal(t, first.Add(nt), clk.Now(), "the waits add up to ClusterNodeTimeout exactly")
}

func TestDivergenceClaimants(t *testing.T) {
	views := []slotView{
		view("x", "A", 1, false), view("y", "B", 3, false), view("z", "A", 2, true), view("w", "", 0, false),
	}
	got := claimantsOf(views)
	require.Len(t, got, 3)
	assert.Equal(t, claimant{id: "B", addr: "10.0.0.B:6379", epoch: 3, votes: 1}, got[0])
	assert.Equal(t, claimant{id: "A", addr: "10.0.0.A:6379", epoch: 2, reachable: true, votes: 2}, got[1],
		"highest epoch any view gives, reachable if any view found it so")
	assert.Equal(t, claimant{id: "", votes: 1}, got[2])
}

func TestDivergenceErrors(t *testing.T) {
	views := []slotView{view("x", "A", 1, true), view("y", "B", 2, false)}
	tests := []struct {
		name     string
		dec      decision
		sentinel error
		contains []string
	}{
		{
			name:     "unreachable claimant",
			dec:      decide(views, divEpoch, divEpoch, time.Second),
			sentinel: ErrClusterFailover,
			contains: []string{"slot 42", "10.0.0.B:6379 (B) epoch 2 unreachable", "10.0.0.A:6379 (A) epoch 1 reachable"},
		},
		{
			name:     "not converged",
			dec:      decide([]slotView{view("x", "A", 1, true), view("y", "B", 2, true)}, divEpoch, divEpoch.Add(2*time.Second), time.Second),
			sentinel: ErrClusterFailover,
			contains: []string{"slot 42", "still contested 2s", "ClusterNodeTimeout 1s"},
		},
		{
			name:     "no views",
			dec:      decide(nil, divEpoch, divEpoch.Add(2*time.Second), time.Second),
			sentinel: ErrClusterFailover,
			contains: []string{"slot 42", "no node answered"},
		},
		{
			name:     "agreement",
			dec:      decide([]slotView{view("x", "A", 1, true)}, divEpoch, divEpoch, time.Second),
			sentinel: ErrSlotMapCorruption,
			contains: []string{"slot 42", "10.0.0.A:6379 (A)", "refresh forced"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.dec.err(42, time.Second)
			assert.ErrorIs(t, err, tt.sentinel)
			other := ErrSlotMapCorruption
			if tt.sentinel == ErrSlotMapCorruption {
				other = ErrClusterFailover
			}
			assert.NotErrorIs(t, err, other)
			assert.True(t, isGuardError(err), "the facade must not mistake it for the caller's expired context")
			for _, s := range tt.contains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestDivergenceRedirectOf(t *testing.T) {
	moved := redisErr("MOVED 3999 127.0.0.1:6381")
	tests := []struct {
		name string
		err  error
		slot int
		addr string
		ok   bool
	}{
		{"moved", moved, 3999, "127.0.0.1:6381", true},
		{"ask", redisErr("ASK 0 10.1.2.3:7000"), 0, "10.1.2.3:7000", true},
		{"wrapped", fmt.Errorf("while doing X: %w", moved), 3999, "127.0.0.1:6381", true},
		{"last slot", redisErr("MOVED 16383 h:1"), 16383, "h:1", true},
		{"slot out of range", redisErr("MOVED 16384 h:1"), 0, "", false},
		{"no address", redisErr("MOVED 12"), 0, "", false},
		{"not a number", redisErr("MOVED x h:1"), 0, "", false},
		{"other reply", redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), 0, "", false},
		{"lower-case is not a redirect", redisErr("moved 1 h:1"), 0, "", false},
		{"nil reply", redis.Nil, 0, "", false},
		{"not a reply", errors.New("MOVED 1 h:1"), 0, "", false},
		{"nil", nil, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot, addr, ok := redirectOf(tt.err)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.slot, slot)
			assert.Equal(t, tt.addr, addr)
		})
	}
}

// What CLUSTER NODES looks like on redis 7 during a slot migration, with
// one master failed and one entry carrying a hostname.
const clusterNodesText = `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [10923->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 12000
garbage line
`

func TestDivergenceViewOf(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		slot  int
		want  slotView
		self  bool
		valid bool
	}{
		{
			name: "range owned by the node asked", text: clusterNodesText, slot: 0,
			want: slotView{owner: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", ownerAddr: "127.0.0.1:30001", epoch: 1},
			self: true, valid: true,
		},
		{
			name: "last slot of a range", text: clusterNodesText, slot: 10922,
			want:  slotView{owner: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1", ownerAddr: "127.0.0.1:30002", epoch: 2},
			valid: true,
		},
		{
			name: "a migrating marker does not move ownership", text: clusterNodesText, slot: 10923,
			want:  slotView{owner: "292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f", ownerAddr: "127.0.0.1:30003", epoch: 3},
			valid: true,
		},
		{
			name: "a single slot", text: clusterNodesText, slot: 12000,
			want: slotView{owner: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", ownerAddr: "127.0.0.1:30001", epoch: 1},
			self: true, valid: true,
		},
		{
			name: "uncovered slot", text: "a 1.2.3.4:5@6 myself,master - 0 0 1 connected 0-10\n", slot: 11,
			valid: true,
		},
		{
			name: "malformed epoch claims nothing", text: "a 1.2.3.4:5@6 master - 0 0 x connected 0-10\n", slot: 1,
			valid: true,
		},
		{name: "empty reply", text: "", slot: 1},
		{name: "not CLUSTER NODES", text: "OK", slot: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, self, ok := viewOf("asked:1", tt.text, tt.slot)
			tt.want.from = "asked:1"
			assert.Equal(t, tt.valid, ok, "valid")
			assert.Equal(t, tt.self, self, "self")
			assert.Equal(t, tt.want, v)
		})
	}
}

func TestDivergenceEpisodes(t *testing.T) {
	const window = time.Second
	clk := clock.NewFake(divEpoch)
	var d divergence
	first := d.observe(7, clk.Now(), window)
	assert.Equal(t, divEpoch, first)

	clk.Advance(600 * time.Millisecond)
	assert.Equal(t, divEpoch, d.observe(7, clk.Now(), window), "cycles on the same slot share the episode")
	assert.Equal(t, clk.Now(), d.observe(8, clk.Now(), window), "another slot has its own")

	clk.Advance(900 * time.Millisecond) // within window of the last cycle, past it since the first
	assert.Equal(t, divEpoch, d.observe(7, clk.Now(), window), "an episode lasts while cycles keep coming")

	clk.Advance(window + time.Millisecond)
	assert.Equal(t, clk.Now(), d.observe(7, clk.Now(), window), "a quiet window ends it")
	d.mu.Lock()
	_, stale := d.episodes[8]
	d.mu.Unlock()
	assert.False(t, stale, "quiet episodes of other slots are swept")

	d.end(7)
	clk.Advance(time.Millisecond)
	assert.Equal(t, clk.Now(), d.observe(7, clk.Now(), window), "end starts the next cycle afresh")
}

func TestDivergenceViewsAreSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d divergence
		var calls atomic.Int32
		release := make(chan struct{})
		gather := func(context.Context) []slotView {
			calls.Add(1)
			<-release
			return []slotView{view("x", "A", 1, true)}
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		results := make([][]slotView, 8)
		for i := range results {
			wg.Go(func() {
				v, err := d.views(ctx, 5, gather)
				assert.NoError(t, err)
				results[i] = v
			})
		}
		synctest.Wait() // one leader gathering, seven followers waiting on it

		// Another slot is not held up by slot 5's gather.
		other, err := d.views(ctx, 6, func(context.Context) []slotView { return nil })
		require.NoError(t, err)
		assert.Empty(t, other)

		close(release)
		wg.Wait()
		assert.Equal(t, int32(1), calls.Load(), "concurrent commands on one slot share one gather")
		for _, r := range results {
			assert.Len(t, r, 1)
		}
	})
}

func TestDivergenceViewsHonourContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var d divergence
		release := make(chan struct{})
		leaderCtx, cancelLeader := context.WithCancel(context.Background())
		leaderDone := make(chan error, 1)
		go func() {
			_, err := d.views(leaderCtx, 5, func(ctx context.Context) []slotView {
				<-release
				return nil
			})
			leaderDone <- err
		}()
		synctest.Wait()

		// A follower whose deadline passes gets ctx.Err() itself, unchanged,
		// while the leader is still gathering.
		short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := d.views(short, 5, nil)
		assert.True(t, err == short.Err() && err != nil, "want ctx.Err() unchanged, got %v", err)

		// A follower of a leader that gives up gathers again on its own
		// rather than take the leader's partial views.
		followerDone := make(chan []slotView, 1)
		go func() {
			v, err := d.views(context.Background(), 5, func(context.Context) []slotView {
				return []slotView{view("x", "B", 2, true)}
			})
			assert.NoError(t, err)
			followerDone <- v
		}()
		synctest.Wait() // the follower waits on the leader's flight
		cancelLeader()
		close(release)
		assert.ErrorIs(t, <-leaderDone, context.Canceled)
		assert.Equal(t, []slotView{view("x", "B", 2, true)}, <-followerDone)
	})
}

// The hook runs for every command in Cluster mode; answers must cost nothing.
func TestDivergenceHealthyPathAllocatesNothing(t *testing.T) {
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}})
	cmd := redis.NewStringCmd(context.Background(), "get", "k")
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"answer", nil},
		{"nil reply", redis.Nil},
		{"error reply", redisErr("WRONGTYPE Operation against a key holding the wrong kind of value")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hook := divergenceHook{c.div}.ProcessHook(func(context.Context, redis.Cmder) error { return tt.err })
			allocs := testing.AllocsPerRun(1000, func() {
				if err := hook(ctx, cmd); err != tt.err {
					t.Fatalf("hook returned %v, want %v", err, tt.err)
				}
			})
			assert.Zero(t, allocs)
		})
	}
}

// Outside Cluster mode a redirect (which cannot normally happen) is left
// alone: there is no slot map to blame.
func TestDivergenceOnlyInClusterMode(t *testing.T) {
	c := newTestClient(t, Config{Addrs: []string{"127.0.0.1:1"}})
	moved := redisErr("MOVED 1 h:1")
	assert.Equal(t, moved, c.div.resolveRedirect(context.Background(), redis.NewStringCmd(context.Background(), "get", "k"), moved, nil))
}

func TestDivergenceViewCandidates(t *testing.T) {
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}, NodeFailureThreshold: 1})
	node := func(addr string) redis.ClusterNode { return redis.ClusterNode{Addr: addr} }
	slots := []redis.ClusterSlot{
		{Start: 0, End: 99, Nodes: []redis.ClusterNode{node("m1:1"), node("r1:1")}},
		{Start: 100, End: 199, Nodes: []redis.ClusterNode{node("m2:1"), node("r2:1")}},
		{Start: 200, End: 299, Nodes: []redis.ClusterNode{node("m3:1")}},
	}
	c.topo.slots.Store(&slots)
	clientsFor := func(addrs ...string) map[string]*redis.Client {
		m := map[string]*redis.Client{}
		for _, a := range addrs {
			m[a] = nil // only presence matters to the choice
		}
		return m
	}
	all := clientsFor("m1:1", "r1:1", "m2:1", "r2:1", "m3:1", "x:1")
	tests := []struct {
		name    string
		slot    int
		target  string
		clients map[string]*redis.Client
		open    []string // nodes whose breaker is open
		want    []string
	}{
		{name: "target, then the owner in our map, then other masters", slot: 150, target: "m1:1", clients: all,
			want: []string{"m1:1", "m2:1", "m3:1"}},
		{name: "a target that is the owner is asked once", slot: 150, target: "m2:1", clients: all,
			want: []string{"m2:1", "m1:1", "m3:1"}},
		{name: "replicas when masters run out", slot: 50, target: "m1:1", clients: clientsFor("m1:1", "r1:1", "r2:1"),
			want: []string{"m1:1", "r1:1", "r2:1"}},
		{name: "nodes the cluster client has no client for are skipped", slot: 50, target: "gone:1", clients: clientsFor("m2:1", "x:1"),
			want: []string{"m2:1", "x:1"}},
		{name: "open breakers are skipped", slot: 250, target: "m1:1", clients: all, open: []string{"m1:1", "m3:1"},
			want: []string{"m2:1", "r1:1", "r2:1"}},
		{name: "nothing to ask", slot: 0, target: "m1:1", clients: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, addr := range tt.open {
				n := c.nodes.get(addr)
				if n.br.State() != breaker.Open {
					tk, err := n.br.Allow()
					require.NoError(t, err)
					n.br.Done(tk, breaker.Failure)
				}
				require.Equal(t, breaker.Open, n.br.State())
			}
			assert.Equal(t, tt.want, c.div.viewCandidates(tt.slot, tt.target, tt.clients))
		})
	}
}

// A claimant missing from the cluster client's map is pinged with a one-off
// client, which it closes.
func TestDivergenceAnswersUnknownNodes(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{srv.Addr}, ReadTimeout: time.Second, DialTimeout: time.Second})
	ctx := testCtx(t, 10*time.Second)
	assert.True(t, c.div.answers(ctx, nil, srv.Addr))
	srv.Kill(t)
	assert.False(t, c.div.answers(ctx, nil, srv.Addr))
}

// cycle points the owner of key's slot at another master with CLUSTER
// SETSLOT <slot> NODE <other>: the owner now redirects to the other master,
// which still redirects back, for ever. The slot must be empty. repair
// undoes it on the owner.
func cycle(t *testing.T, cl *redistest.Cluster, key string) (owner, other *redistest.Server, repair func()) {
	t.Helper()
	slot := redistest.Slot(key)
	owner = cl.MasterForSlot(t, slot)
	ctx := testCtx(t, 10*time.Second)
	n, err := owner.Admin().ClusterCountKeysInSlot(ctx, slot).Result()
	require.NoError(t, err)
	require.Zero(t, n, "cycle needs an empty slot: a node refuses to give away a slot it holds keys in")
	for _, m := range cl.Masters {
		if m != owner {
			other = m
			break
		}
	}
	setslot := func(target *redistest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, owner.Admin().Do(ctx, "cluster", "setslot", slot, "node", cl.NodeID(t, target)).Err())
	}
	setslot(other)
	return owner, other, func() { setslot(owner) }
}

func TestDivergenceCycleRaisesWithinNodeTimeout(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[0], "div:cycle:")
	owner, other, _ := cycle(t, cl, key)

	start := time.Now()
	err := c.Get(ctx, key).Err()
	took := time.Since(start)
	require.ErrorIs(t, err, ErrClusterFailover, "views disagree and both claimants answer: a failover that never converges")
	_, isRedirect := redis.IsMovedError(err)
	assert.False(t, isRedirect, "the raw redirect leaked")
	assert.Contains(t, err.Error(), owner.Addr)
	assert.Contains(t, err.Error(), other.Addr)
	assert.GreaterOrEqual(t, took, 900*time.Millisecond, "raised before ClusterNodeTimeout: no time to converge was given")
	assert.Less(t, took, 2*time.Second+3*time.Second, "beyond ClusterNodeTimeout + ReadTimeout, with slack for a busy machine")
	s := c.Stats().Divergence
	assert.Equal(t, uint64(1), s.Failover)
	assert.Positive(t, s.Converging)
	assert.Zero(t, s.SlotMapCorruption)

	// The slot is known to be stuck: the next command on it fails fast.
	start = time.Now()
	require.ErrorIs(t, c.Get(ctx, key).Err(), ErrClusterFailover)
	assert.Less(t, time.Since(start), 900*time.Millisecond, "a slot known to be stuck made the caller wait again")
}

func TestDivergenceCycleRecoversWhenRepaired(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 20 * time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[1], "div:repair:")
	_, _, repair := cycle(t, cl, key)

	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Set(ctx, key, "v", 0).Err() }()
	redistest.WaitFor(t, 10*time.Second, "the command to wait on the contested slot", func() error {
		if c.Stats().Divergence.Converging == 0 {
			return errors.New("no back-off yet")
		}
		return nil
	})
	repair()
	require.NoError(t, <-done, "the command should be served once ownership is consistent")
	assert.Less(t, time.Since(start), 15*time.Second, "it waited as if nothing changed")
	assert.Equal(t, uint64(1), c.Stats().Divergence.Recovered)
	assert.Zero(t, c.Stats().Divergence.Failover)
	assert.Equal(t, "v", c.Get(ctx, key).Val())
}

func TestDivergenceCycleHonoursCallerDeadline(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 20 * time.Second, ReadTimeout: time.Second})
	require.NoError(t, c.Ping(testCtx(t, 10*time.Second)).Err())
	key := cl.KeyOn(t, cl.Masters[2], "div:deadline:")
	cycle(t, cl, key)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Get(ctx, key).Err()
	assert.True(t, err == ctx.Err(), "want ctx.Err() unchanged, got %v", err)
	assert.Less(t, time.Since(start), 300*time.Millisecond+2*time.Second)
}

// A slot left MIGRATING on its owner with no importing side makes an ASK
// loop: the owner sends ASK to the target, which sends MOVED back. Every
// node agrees on the owner, so this is not a failover.
func TestDivergenceAskLoopIsSlotMapCorruption(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: 5 * time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	owner := cl.Masters[0]
	key := cl.KeyOn(t, owner, "div:ask:")
	require.NoError(t, owner.Admin().Do(ctx, "cluster", "setslot", redistest.Slot(key), "migrating", cl.NodeID(t, cl.Masters[1])).Err())

	start := time.Now()
	err := c.Get(ctx, key).Err()
	require.ErrorIs(t, err, ErrSlotMapCorruption)
	assert.NotErrorIs(t, err, ErrClusterFailover)
	assert.Contains(t, err.Error(), owner.Addr)
	assert.Less(t, time.Since(start), 3*time.Second, "agreement needs no waiting")
	assert.Equal(t, uint64(1), c.Stats().Divergence.SlotMapCorruption)
	assert.Zero(t, c.Stats().Divergence.Failover)
}

// FuzzDecide feeds decide arbitrary views and timings. data encodes the
// views, three bytes each: owner (none or one of four nodes), its epoch
// (small, so that collisions happen), and whether it answered.
func FuzzDecide(f *testing.F) {
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1}, int64(0), int64(time.Second))                    // agree
	f.Add([]byte{1, 1, 1, 2, 2, 1, 1, 1, 1}, int64(100*time.Millisecond), int64(time.Second)) // disagree, reachable
	f.Add([]byte{1, 1, 1, 2, 2, 0}, int64(0), int64(time.Second))                             // disagree, unreachable
	f.Add([]byte{1, 2, 0, 2, 2, 1}, int64(0), int64(time.Second))                             // equal epochs
	f.Add([]byte{}, int64(2*time.Second), int64(time.Second))                                 // no views, expired
	f.Add([]byte{3, 7, 0}, int64(time.Hour), int64(time.Second))                              // single view
	f.Add([]byte{0, 0, 0, 4, 0, 1}, int64(-time.Minute), int64(0))                            // no owner vs one; clock back; zero timeout
	f.Fuzz(func(t *testing.T, data []byte, elapsed, nodeTimeout int64) {
		var views []slotView
		for i := 0; i+3 <= len(data) && len(views) < 16; i += 3 {
			owner := ""
			if o := data[i] % 5; o > 0 {
				owner = string(rune('A' + o - 1))
			}
			views = append(views, view(fmt.Sprintf("n%d", i/3), owner, uint64(data[i+1]%4), data[i+2]&1 == 1))
		}
		nt := time.Duration(nodeTimeout)
		first := divEpoch
		now := first.Add(time.Duration(elapsed))
		orig := slices.Clone(views)

		d := decide(views, first, now, nt)

		require.Equal(t, orig, views, "decide modified its input")
		since := max(now.Sub(first), 0)
		agree := len(views) > 0 && !slices.ContainsFunc(views, func(v slotView) bool { return v.owner != views[0].owner })
		switch d.verdict {
		case corruption:
			require.True(t, agree, "corruption without agreeing views")
		case failover:
			require.False(t, agree, "agreeing views yielded ErrClusterFailover")
		case converging:
			require.False(t, agree, "agreeing views made the command wait")
			require.Less(t, since, nt, "still waiting after ClusterNodeTimeout")
			require.Positive(t, d.backoff)
			require.LessOrEqual(t, d.backoff, nt-since, "back-off reaches past ClusterNodeTimeout")
			if div := max(since, minDivergence); div <= math.MaxInt64/2 {
				require.LessOrEqual(t, d.backoff, 2*div, "back-off above twice the divergence")
			}
		default:
			t.Fatalf("unknown verdict %v", d.verdict)
		}
		if agree {
			require.Equal(t, corruption, d.verdict, "agreeing views must be corruption")
		}

		// The highest-epoch claimants, computed independently.
		var top uint64
		epochs := map[string]uint64{}
		reach := map[string]bool{}
		for _, v := range views {
			if v.owner != "" {
				epochs[v.owner] = max(epochs[v.owner], v.epoch)
				reach[v.owner] = reach[v.owner] || v.reachable
			}
		}
		for _, e := range epochs {
			top = max(top, e)
		}
		topAnswers := false
		for id, e := range epochs {
			topAnswers = topAnswers || (e == top && reach[id])
		}
		if !agree && len(views) > 0 && !topAnswers {
			require.Equal(t, failover, d.verdict, "an unreachable top claimant must fail over at once")
		}

		// Claimants: distinct, ordered by epoch, every view counted.
		votes := 0
		for i, c := range d.claimants {
			votes += c.votes
			if i > 0 {
				require.GreaterOrEqual(t, d.claimants[i-1].epoch, c.epoch)
				require.NotEqual(t, d.claimants[i-1].id, c.id)
			}
		}
		require.Equal(t, len(views), votes)

		// The order of the views does not matter.
		slices.Reverse(views)
		r := decide(views, first, now, nt)
		require.Equal(t, d.verdict, r.verdict)
		require.Equal(t, d.reason, r.reason)
		require.Equal(t, d.backoff, r.backoff)
		require.Equal(t, d.claimants, r.claimants)

		// A raise names the slot and carries the right sentinel.
		if d.verdict != converging {
			err := d.err(99, nt)
			want := ErrClusterFailover
			if d.verdict == corruption {
				want = ErrSlotMapCorruption
			}
			require.ErrorIs(t, err, want)
			require.Contains(t, err.Error(), "slot 99")
		}
	})
}

// Blocking commands run on the long client (admission.go), which follows
// redirects with go-redis's own loop; a redirect cycle must end there as it
// does for ordinary commands, typed, not as the raw MOVED go-redis gives up
// with. (Found by the chaos soak: BLPOPs returned raw MOVED in a graceful
// failover.)
func TestDivergenceCycleOnBlockingCommandsIsTyped(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: cl.Addrs(), ClusterNodeTimeout: time.Second, ReadTimeout: time.Second})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, c.Ping(ctx).Err())
	key := cl.KeyOn(t, cl.Masters[0], "div:blocking:")
	cycle(t, cl, key)

	err := c.BLPop(ctx, 100*time.Millisecond, key).Err()
	require.ErrorIs(t, err, ErrClusterFailover, "BLPOP")
	_, moved := redis.IsMovedError(err)
	assert.False(t, moved, "the raw redirect leaked")

	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.BLPop(ctx, 100*time.Millisecond, key)
		return nil
	})
	require.Error(t, err)
	for _, cmd := range cmds {
		_, _, raw := redirectOf(cmd.Err())
		assert.False(t, raw, "a raw redirect leaked from a blocking pipeline: %v", cmd.Err())
		assert.True(t, errors.Is(cmd.Err(), ErrClusterFailover) || errors.Is(cmd.Err(), ErrSlotMapCorruption), "%v", cmd.Err())
	}
}
