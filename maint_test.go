package redisguard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// go-redis's default, maintenance notifications in auto mode, works on a
// server that does not know CLIENT MAINT_NOTIFICATIONS (Redis 7.0): the
// client is built, the handshake is refused and go-redis turns
// notifications off, and the refusal is set-up, not a node failure: with a
// breaker that opens on the first failure, nothing opens and no command
// fails.
func TestMaintNotificationsAutoOnAServerWithout(t *testing.T) {
	cluster := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	srv := redistest.StartServer(t)
	for _, topo := range []struct {
		name  string
		addrs []string
	}{
		{"Standalone", []string{srv.Addr}},
		{"Cluster", cluster.Addrs()},
	} {
		for _, m := range []struct {
			name string
			cfg  *maintnotifications.Config
		}{
			{"nil", nil},
			{"auto", &maintnotifications.Config{Mode: maintnotifications.ModeAuto}},
		} {
			t.Run(topo.name+"/"+m.name, func(t *testing.T) {
				c := newTestClient(t, Config{Addrs: topo.addrs, Protocol: 3, NodeFailureThreshold: 1, MinIdleConns: 2,
					MaintNotificationsConfig: m.cfg})
				ctx := testCtx(t, 10*time.Second)
				if cl, ok := c.UniversalClient.(*redis.Client); ok {
					require.NotNil(t, cl.GetMaintNotificationsManager(), "notifications are off before the first connection")
				}
				var wg sync.WaitGroup
				errs := make(chan error, 8*50)
				for w := 0; w < 8; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < 50; i++ {
							key := fmt.Sprintf("maint:%d:%d", w, i)
							if err := c.Set(ctx, key, "v", time.Minute).Err(); err != nil {
								errs <- err
							}
							if err := c.Get(ctx, key).Err(); err != nil {
								errs <- err
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Errorf("a command failed: %v", err)
				}

				// go-redis drops a node client's manager when the server
				// refuses the handshake in auto mode.
				nodes := 0
				require.NoError(t, forEachNodeClient(ctx, c, func(cl *redis.Client) {
					nodes++
					assert.Nil(t, cl.GetMaintNotificationsManager(), "%s: notifications still on", cl.Options().Addr)
				}))
				require.Positive(t, nodes)
				st := c.Stats()
				require.NotEmpty(t, st.Nodes)
				for _, n := range st.Nodes {
					assert.Equal(t, "closed", n.State, n.Addr)
					assert.Zero(t, n.Opens, "breaker openings on %s", n.Addr)
					assert.Zero(t, n.ConsecutiveFailures, "failures scored on %s", n.Addr)
				}
				t.Logf("%d node clients turned notifications off, %d breakers, none opened", nodes, len(st.Nodes))
			})
		}
	}
}

// forEachNodeClient calls fn with the go-redis client of each node c's
// ordinary client talks to.
func forEachNodeClient(ctx context.Context, c *Client, fn func(*redis.Client)) error {
	switch u := c.UniversalClient.(type) {
	case *redis.Client:
		fn(u)
		return nil
	case *redis.ClusterClient:
		var mu sync.Mutex
		return u.ForEachShard(ctx, func(_ context.Context, cl *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			fn(cl)
			return nil
		})
	}
	return fmt.Errorf("%T", c.UniversalClient)
}
