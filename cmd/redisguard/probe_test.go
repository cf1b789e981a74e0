package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/redistest"
)

// The probe builds a client per run and must leave nothing behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runProbe calls run as main would. Tests set REDIS_PASSWORD themselves
// (t.Setenv), so the environment of the machine running them cannot leak in.
func runProbe(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"probe"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Acceptance 5: exit codes against real servers.
func TestProbeExitCodes(t *testing.T) {
	t.Setenv(envPassword, "")
	primary := redistest.StartServer(t)
	replica := redistest.StartReplica(t, redistest.StartServer(t))
	paused := redistest.StartServer(t)
	paused.Pause(t)
	gone := redistest.StartServer(t)
	gone.Kill(t)

	tests := []struct {
		name       string
		args       []string
		want       int
		wantOut    string // in stdout
		wantErr    string // in stderr
		maxElapsed time.Duration
	}{
		{name: "healthy, ping only", args: []string{"--addr", primary.Addr}, want: 0,
			wantOut: "healthy (standalone, " + primary.Addr + "): ping "},
		{name: "healthy with a write", args: []string{"--addr", primary.Addr, "--write-key", "redisguard:health:probe"}, want: 0,
			wantOut: ", write "},
		{name: "healthy from a URL", args: []string{"--url", "redis://" + primary.Addr + "/0", "--write-key", "redisguard:health:probe"}, want: 0,
			wantOut: "healthy (standalone"},
		{name: "explicit mode", args: []string{"--addr", primary.Addr, "--mode", "Standalone"}, want: 0},
		{name: "read-only replica answers PING", args: []string{"--addr", replica.Addr}, want: 0},
		{name: "read-only replica refuses the write", args: []string{"--addr", replica.Addr, "--write-key", "redisguard:health:probe"}, want: 1,
			wantOut: "write failed: READONLY"},
		{name: "paused server", args: []string{"--addr", paused.Addr, "--timeout", "300ms"}, want: 1,
			wantOut: "unhealthy (standalone", maxElapsed: 1500 * time.Millisecond},
		{name: "nothing listening", args: []string{"--addr", gone.Addr, "--timeout", "300ms"}, want: 1,
			wantOut: "ping failed", maxElapsed: 1500 * time.Millisecond},

		{name: "no subcommand flags at all", args: nil, want: 2, wantErr: "--addr or --url is required"},
		{name: "empty addresses", args: []string{"--addr", " , "}, want: 2, wantErr: "--addr or --url is required"},
		{name: "unknown flag", args: []string{"--adr", primary.Addr}, want: 2, wantErr: "flag provided but not defined"},
		{name: "help is not success", args: []string{"-h"}, want: 2, wantErr: "Exit status: 0 healthy"},
		{name: "stray argument", args: []string{"--addr", primary.Addr, "extra"}, want: 2, wantErr: `unexpected argument "extra"`},
		{name: "unknown mode", args: []string{"--addr", primary.Addr, "--mode", "ring"}, want: 2, wantErr: `--mode "ring"`},
		{name: "zero timeout", args: []string{"--addr", primary.Addr, "--timeout", "0s"}, want: 2, wantErr: "--timeout must be positive"},
		{name: "bad timeout", args: []string{"--addr", primary.Addr, "--timeout", "soon"}, want: 2, wantErr: "invalid value"},
		{name: "url and addr", args: []string{"--url", "redis://" + primary.Addr, "--addr", primary.Addr}, want: 2,
			wantErr: "--url cannot be combined with --addr"},
		{name: "bad url", args: []string{"--url", "http://" + primary.Addr}, want: 2, wantErr: "invalid config"},
		{name: "sentinel without a master name", args: []string{"--addr", primary.Addr, "--mode", "sentinel"}, want: 2,
			wantErr: "MasterName"},
		{name: "several addresses in standalone mode", args: []string{"--addr", primary.Addr + "," + replica.Addr, "--mode", "standalone"}, want: 2,
			wantErr: "ModeStandalone takes exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := runProbe(t, tt.args...)
			elapsed := time.Since(start)
			t.Logf("exit %d in %v\nstdout: %s\nstderr: %s", code, elapsed, out, errOut)
			assert.Equal(t, tt.want, code)
			if tt.wantOut != "" {
				assert.Contains(t, out, tt.wantOut)
			}
			if tt.wantErr != "" {
				assert.Contains(t, errOut, tt.wantErr)
			}
			if tt.want == 2 {
				assert.Empty(t, out, "bad usage prints no report")
			} else {
				assert.Equal(t, 1, strings.Count(out, "\n"), "one line")
			}
			if tt.maxElapsed > 0 {
				assert.Less(t, elapsed, tt.maxElapsed)
			}
		})
	}
}

func TestProbeJSON(t *testing.T) {
	t.Setenv(envPassword, "")
	srv := redistest.StartServer(t)
	code, out, _ := runProbe(t, "--addr", srv.Addr, "--write-key", "redisguard:health:probe", "--json")
	require.Equal(t, 0, code)
	var rep redisguard.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep), "stdout %q", out)
	assert.True(t, rep.Healthy)
	assert.Equal(t, "standalone", rep.Mode)
	require.NotNil(t, rep.Write)
	assert.True(t, rep.Write.OK)

	ttl, err := srv.Admin().PTTL(testCtx(t), "redisguard:health:probe").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Duration(0), "the probe key expires on its own")
	assert.LessOrEqual(t, ttl, redisguard.DefaultHealthWriteTTL)
}

// The password reaches the server from the flag, the URL or the environment,
// and never reaches the output, whether it is right or wrong.
func TestProbePassword(t *testing.T) {
	const secret = "pr0be-S3cret-value"
	const wrong = "not-the-pr0be-secret"
	srv := redistest.StartServer(t)
	// Set at runtime: the harness cannot start a server with --requirepass,
	// since it waits for an unauthenticated PING.
	require.NoError(t, srv.Admin().ConfigSet(testCtx(t), "requirepass", secret).Err())

	tests := []struct {
		name    string
		env     string
		args    []string
		want    int
		wantOut string
	}{
		{name: "flag", args: []string{"--addr", srv.Addr, "--password", secret}, want: 0},
		{name: "environment", env: secret, args: []string{"--addr", srv.Addr}, want: 0},
		{name: "flag wins over environment", env: wrong, args: []string{"--addr", srv.Addr, "--password", secret}, want: 0},
		{name: "url", args: []string{"--url", "redis://:" + secret + "@" + srv.Addr}, want: 0},
		{name: "wrong flag", args: []string{"--addr", srv.Addr, "--password", wrong}, want: 1, wantOut: "WRONGPASS"},
		{name: "wrong environment", env: wrong, args: []string{"--addr", srv.Addr}, want: 1, wantOut: "WRONGPASS"},
		{name: "wrong url", args: []string{"--url", "redis://:" + wrong + "@" + srv.Addr}, want: 1, wantOut: "WRONGPASS"},
		{name: "none", args: []string{"--addr", srv.Addr}, want: 1, wantOut: "NOAUTH"},
		{name: "bad usage with a password", env: secret, args: []string{"--addr", srv.Addr, "--mode", secret}, want: 2},
	}
	for _, tt := range tests {
		for _, asJSON := range []bool{false, true} {
			name := tt.name
			args := tt.args
			if asJSON {
				name += " json"
				args = append(append([]string(nil), args...), "--json")
			}
			t.Run(name, func(t *testing.T) {
				t.Setenv(envPassword, tt.env)
				code, out, errOut := runProbe(t, args...)
				t.Logf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
				assert.Equal(t, tt.want, code)
				if tt.wantOut != "" {
					assert.Contains(t, out, tt.wantOut)
				}
				for _, text := range []string{out, errOut} {
					assert.NotContains(t, text, secret)
					assert.NotContains(t, text, wrong)
				}
			})
		}
	}
}

// The existing subcommand keeps working next to the new one.
// The demo itself is tested in demo_test.go; here only the dispatch.
func TestRunUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, run(nil, &out, &errOut))
	assert.Equal(t, 2, run([]string{"nope"}, &out, &errOut))
	assert.Equal(t, 2, run([]string{"demo", "--nope"}, &out, &errOut))
}

// go-redis's own log lines stay off the probe's output unless asked for
// with --verbose. The lines here are those of go-redis's failover client,
// which asks the sentinels itself ("sentinel: GetMasterAddrByName ...
// failed"): redisguard's own probes write none, so a standalone address
// that refuses connections leaves nothing to route.
func TestProbeOutputIsClean(t *testing.T) {
	t.Cleanup(logging.Enable) // go-redis's own default, for the other tests
	args := []string{"--master-name", "mymaster", "--addr", "127.0.0.1:1", "--timeout", "300ms"}
	code, stdout, stderr := runProbe(t, args...)
	assert.Equal(t, exitUnhealthy, code)
	assert.Contains(t, stdout, "unhealthy")
	assert.NotContains(t, stderr, "source=go-redis")
	_, _, stderr = runProbe(t, append(args, "--verbose")...)
	assert.Contains(t, stderr, "source=go-redis")
	_, _, stderr = runProbe(t, "--addr", "127.0.0.1:1", "--timeout", "300ms", "--verbose")
	assert.NotContains(t, stderr, "source=go-redis", "a probe's failed dial")
}
