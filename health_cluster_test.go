package redisguard

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A master that has just restarted reports cluster_state:fail, and refuses
// writes, for its first seconds (Redis waits before a rejoining master takes
// writes) while the other masters report ok: readiness stays 200, degraded,
// naming it, even for the pods whose write key it owns.
func TestReadinessThroughARestartedMaster(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	c := newTestClient(t, Config{Addrs: cl.Addrs(), ReadTimeout: 300 * time.Millisecond})
	restarted := cl.Masters[1]
	h := c.ReadinessHandler(ReadinessOptions{WriteKey: cl.KeyOn(t, restarted, "ready:"), CacheFor: time.Nanosecond})
	status, rep := get(t, h, readyz())
	require.Equal(t, http.StatusOK, status, "%v", rep)

	restarted.Restart(t)
	back := time.Now()
	var polls, failing int
	redistest.WaitFor(t, 20*time.Second, "the restarted master to serve", func() error {
		status, rep := get(t, h, readyz())
		polls++
		assert.Equal(t, http.StatusOK, status, "%v after the restart: %v", time.Since(back), rep)
		for _, m := range rep.Masters {
			if m.Node == restarted.Addr && !m.OK {
				if strings.Contains(m.Error, "cluster_state:fail") {
					failing++
				}
				assert.True(t, rep.Degraded, "%v", rep)
				assert.Equal(t, []string{restarted.Addr}, rep.MastersDown)
				return errors.New(m.Error)
			}
		}
		return nil
	})
	t.Logf("%d polls until the restarted master served, %v after it answered PING; %d saw its cluster_state:fail", polls, time.Since(back).Round(time.Millisecond), failing)
	assert.Positive(t, failing, "no poll saw the restarted master's cluster_state:fail")
}

// The Cluster rule, from the masters' round trips: healthy while any master
// serves, degraded unless all do; with every shard required, healthy only
// when all do and no master's breaker is open.
func TestClusterVerdict(t *testing.T) {
	up := func(addr string) *StepResult { return &StepResult{OK: true, Node: addr} }
	down := func(addr string) *StepResult { return &StepResult{Node: addr, Error: "ping: i/o timeout"} }
	closed := &StepResult{OK: true}
	open := &StepResult{Error: "breaker open for master b"}
	tests := []struct {
		name              string
		masters           []*StepResult
		breakers          *StepResult
		allShards         bool
		healthy, degraded bool
	}{
		{"all serve", []*StepResult{up("a"), up("b"), up("c")}, closed, false, true, false},
		{"one does not", []*StepResult{up("a"), down("b"), up("c")}, closed, false, true, true},
		{"one does not, its breaker open", []*StepResult{up("a"), down("b"), up("c")}, open, false, true, true},
		{"only one serves", []*StepResult{down("a"), down("b"), up("c")}, closed, false, true, true},
		{"none serves", []*StepResult{down("a"), down("b"), down("c")}, closed, false, false, false},
		{"all required, all serve", []*StepResult{up("a"), up("b"), up("c")}, closed, true, true, false},
		{"all required, one does not", []*StepResult{up("a"), down("b"), up("c")}, closed, true, false, false},
		{"all required, a breaker open", []*StepResult{up("a"), up("b"), up("c")}, open, true, false, false},
		{"all required, none serves", []*StepResult{down("a"), down("b"), down("c")}, closed, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The write key's own master is the first; its failure alone
			// decides nothing.
			r := Report{Mode: "cluster", Ping: tt.masters[0], Breakers: tt.breakers, Masters: tt.masters}
			for _, m := range tt.masters {
				if !m.OK {
					r.MastersDown = append(r.MastersDown, m.Node)
				}
			}
			r.judge(tt.allShards)
			assert.Equal(t, tt.healthy, r.Healthy, "healthy")
			assert.Equal(t, tt.degraded, r.Degraded, "degraded")
		})
	}

	t.Run("no master reached", func(t *testing.T) {
		r := Report{Mode: "cluster", Ping: &StepResult{Error: "CLUSTERDOWN"}, ClusterState: &StepResult{Skipped: true}}
		r.judge(false)
		assert.False(t, r.Healthy)
	})
}

// The keys written on the other masters derive from the write key, keep it
// as their prefix (ACL key patterns), and reach other slots; a write key
// with a hash tag of its own has that tag extended, since another would not
// count.
func TestDerivedKey(t *testing.T) {
	tests := []struct {
		key  string
		n    int
		want string
	}{
		{"redisguard:health:svc", 0, "redisguard:health:svc{0}"},
		{"redisguard:health:svc", 17, "redisguard:health:svc{17}"},
		{"redisguard:health:{svc}", 3, "redisguard:health:{svc:3}"},
		{"redisguard:health:{svc}:x", 3, "redisguard:health:{svc:3}:x"},
		{"half{open", 2, "half{open{2}"},
		{"empty{}tag", 2, "empty{}tag{2}"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, derivedKey(tt.key, tt.n), "%s, %d", tt.key, tt.n)
	}
	for _, key := range []string{"redisguard:health:svc", "redisguard:health:{svc}", "half{open", "empty{}tag"} {
		slots := make(map[int]bool)
		for n := range 64 {
			slots[redistest.Slot(derivedKey(key, n))] = true
		}
		assert.Greater(t, len(slots), 32, "%s: the derived keys reach few slots", key)
	}
}
