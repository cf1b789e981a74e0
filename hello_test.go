package redisguard

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// A bare HELLO names the server's role and mode and the connection's id,
// as ROLE, INFO and CLIENT ID would, on a RESP2 connection (a flat list)
// as on a RESP3 one (a map), and changes nothing about the connection.
func TestHelloReadsRoleModeAndID(t *testing.T) {
	srv := redistest.StartServer(t)
	rep := redistest.StartReplica(t, srv)
	for _, tc := range []struct {
		srv      *redistest.Server
		protocol int
		role     string
	}{
		{srv, 2, "master"}, {srv, 3, "master"}, {rep, 2, "replica"}, {rep, 3, "replica"},
	} {
		t.Run(fmt.Sprintf("%s RESP%d", tc.role, tc.protocol), func(t *testing.T) {
			ctx := testCtx(t, 5*time.Second)
			opt := &redis.Options{Protocol: tc.protocol, DialTimeout: time.Second}
			probeConn(ctx, opt, tc.srv.Addr, time.Second, func(cl *redis.Client) {
				h, err := askHello(ctx, cl.Process)
				require.NoError(t, err)
				assert.Equal(t, tc.role, h.role)
				assert.Equal(t, "standalone", h.mode)
				id, err := cl.ClientID(ctx).Result()
				require.NoError(t, err)
				assert.Equal(t, id, h.id, "the id of the connection HELLO was sent on")
				proto, err := cl.Do(ctx, "client", "info").Text()
				require.NoError(t, err)
				assert.Contains(t, proto, fmt.Sprintf("resp=%d", tc.protocol), "HELLO changed the connection's protocol")
			})
		})
	}
}

func TestParseHelloLeavesMissingFieldsZero(t *testing.T) {
	assert.Equal(t, helloInfo{}, parseHello(nil))
	assert.Equal(t, helloInfo{role: "master"}, parseHello(map[string]interface{}{"role": "master", "id": "7", "mode": 3}))
	assert.Equal(t, helloInfo{role: "replica", mode: "cluster", id: 7},
		parseHello(map[string]interface{}{"role": "replica", "mode": "cluster", "id": int64(7)}))
}
