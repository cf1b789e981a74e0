package redisguard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/breaker"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/redisguard/redisguard/internal/slotmap"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestDivergenceViewCandidates(t *testing.T) {
	c := newTestClient(t, Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}, NodeFailureThreshold: 1})
	node := func(addr string) redis.ClusterNode { return redis.ClusterNode{Addr: addr} }
	slots := []redis.ClusterSlot{
		{Start: 0, End: 99, Nodes: []redis.ClusterNode{node("m1:1"), node("r1:1")}},
		{Start: 100, End: 199, Nodes: []redis.ClusterNode{node("m2:1"), node("r2:1")}},
		{Start: 200, End: 299, Nodes: []redis.ClusterNode{node("m3:1")}},
	}
	c.topo.view.Store(slotmap.New(slots))
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
