package redisguard

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The ordinary client, the long client and the recovery probes are built
// from the same options: a handshake setting (here the client name) reaches
// the server on all three.
func TestEveryClientSharesTheHandshake(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}, ClientName: "build-shared"})
	ctx := testCtx(t, 20*time.Second)

	name, err := c.Do(ctx, "client", "getname").Text()
	require.NoError(t, err)
	assert.Equal(t, "build-shared", name, "ordinary client")

	require.Equal(t, redis.Nil, c.BLPop(ctx, 50*time.Millisecond, "build:q").Err()) // opens a long connection
	list, err := srv.Admin().ClientList(ctx).Result()
	require.NoError(t, err)
	assert.Contains(t, list, "cmd=blpop", "the long connection")
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, "cmd=blpop") {
			assert.Contains(t, line, "name=build-shared", "long client")
		}
	}

	cmd, err := probeAddr(ctx, c.probeOpt, srv.Addr, time.Second, "client", "getname")
	require.NoError(t, err)
	assert.Equal(t, "build-shared", cmd.Val(), "recovery probe")
}

// newGoRedis is the only place that constructs a go-redis client: any other
// constructor call in the package's code would be a client whose options
// and hooks the hook-order table does not describe.
func TestOnlyNewGoRedisBuildsClients(t *testing.T) {
	ctor := regexp.MustCompile(`redis\.New(Client|ClusterClient|FailoverClient|FailoverClusterClient|SentinelClient|Ring|UniversalClient)\(`)
	clone := regexp.MustCompile(`(\w+)\.WithTimeout\(`) // go-redis's clone sharing the pools
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "build.go" {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Empty(t, ctor.FindAllString(string(src), -1), "%s constructs a go-redis client outside newGoRedis", f)
		for _, m := range clone.FindAllStringSubmatch(string(src), -1) {
			assert.Equal(t, "context", m[1], "%s clones a go-redis client outside newGoRedis", f)
		}
	}
	src, err := os.ReadFile("build.go")
	require.NoError(t, err)
	assert.NotEmpty(t, ctor.FindAllString(string(src), -1), "the pattern no longer matches go-redis's constructors")
}
