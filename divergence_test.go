package redisguard

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// What CLUSTER NODES looks like on redis 7 during a slot migration, with
// one master failed and one entry carrying a hostname.
const clusterNodesText = `07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-4 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922 [10923->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 12000
garbage line
`

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
	c := newTestClient(t, Config{Mode: ModeStandalone, Addrs: []string{"127.0.0.1:1"}})
	moved := redisErr("MOVED 1 h:1")
	assert.Equal(t, moved, c.div.resolveRedirect(context.Background(), redis.NewStringCmd(context.Background(), "get", "k"), moved, nil))
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
