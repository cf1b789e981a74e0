package redisguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The set-up marker says whether the server had answered, survives one
// level of unwrapping (go-redis strips one from a failed handshake), keeps
// the cause visible to errors.Is, and is removed before the caller sees it.
func TestSetupFailureMarker(t *testing.T) {
	unanswered := setupFailure(io.EOF, false)
	answered := setupFailure(io.EOF, true)
	assert.True(t, isSetupFailure(unanswered))
	assert.True(t, isUnansweredSetup(unanswered))
	assert.True(t, isSetupFailure(answered))
	assert.False(t, isUnansweredSetup(answered))
	assert.ErrorIs(t, unanswered, io.EOF)

	assert.True(t, isSetupFailure(errors.Unwrap(wrapOnce{unanswered})), "a marker lost to one Unwrap")
	assert.Same(t, unanswered, setupFailure(unanswered, true), "a marked error is marked again")
	assert.Nil(t, setupFailure(nil, false))
	assert.Equal(t, io.EOF, withoutSetup(unanswered))
	assert.Equal(t, io.EOF, withoutSetup(io.EOF))
	assert.False(t, isSetupFailure(io.EOF))
}

// A connection whose set-up fails hands the caller go-redis's own error,
// never the set-up marker: a PubSub's set-up runs with no redisguard frame
// above it, and its caller type-asserts net.Error as go-redis's suite does.
func TestSetupFailureReachesNoCallerMarked(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{"write timeout", Config{WriteTimeout: time.Nanosecond}},
		{"read timeout", Config{ReadTimeout: time.Nanosecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.Mode, cfg.Addrs = ModeStandalone, []string{srv.Addr}
			c := newTestClient(t, cfg)
			hooked := &errHook{}
			c.AddHook(hooked)
			ctx := testCtx(t, 10*time.Second)

			ps := c.Subscribe(ctx)
			defer ps.Close()
			err := ps.Subscribe(ctx, "_")
			require.Error(t, err)
			if netErr, ok := err.(net.Error); assert.True(t, ok, "%T is not a net.Error", err) {
				assert.True(t, netErr.Timeout())
			}

			err = c.Ping(ctx).Err()
			require.Error(t, err)
			assert.False(t, isSetupFailure(err), "%T reached the caller", err)
			hooked.mu.Lock()
			defer hooked.mu.Unlock()
			for _, err := range hooked.errs {
				assert.False(t, isSetupFailure(err), "%T reached a user's hook", err)
			}
		})
	}
}

// errHook records the error every command it sees ends with.
type errHook struct {
	mu   sync.Mutex
	errs []error
}

func (h *errHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *errHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.errs = append(h.errs, err)
		h.mu.Unlock()
		return err
	}
}

func (h *errHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		h.errs = append(h.errs, err)
		h.mu.Unlock()
		return err
	}
}

// wrapOnce wraps an error one level, as go-redis's handshake error does.
type wrapOnce struct{ err error }

func (w wrapOnce) Error() string { return "handshake: " + w.err.Error() }
func (w wrapOnce) Unwrap() error { return w.err }

// Every command go-redis sends while it sets up a connection is taken for a
// set-up command, and the commands an OnConnect sends are when they are
// named like one; the caller's command is not. A go-redis release that adds
// a step to its handshake fails here.
func TestHandshakeCommandsAreRecognised(t *testing.T) {
	srv := redistest.StartServer(t)
	require.NoError(t, srv.Admin().ConfigSet(testCtx(t, 5*time.Second), "requirepass", "pw").Err())
	for _, protocol := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", protocol), func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			cl := redis.NewClient(&redis.Options{
				Addr: srv.Addr, Password: "pw", DB: 1, ClientName: "handshake", Protocol: protocol, MaxRetries: -1,
				OnConnect: duringSetUp(func(ctx context.Context, cn *redis.Conn) error {
					if err := cn.Do(ctx, "client", "setname", "handshake-again").Err(); err != nil {
						return err
					}
					return cn.Ping(ctx).Err()
				}),
			})
			defer cl.Close()
			rec := &sentRecorder{}
			cl.AddHook(rec)
			echo := cl.Echo(ctx, "the caller's")
			require.NoError(t, echo.Err())

			sent := rec.all()
			names := map[string]bool{}
			callers := 0
			for _, s := range sent {
				switch {
				case s.cmd == redis.Cmder(echo):
					callers++
					assert.False(t, isHandshake(s.ctx, s.cmd), "the caller's command")
				case settingUp(s.ctx):
					assert.Equal(t, namedLikeHandshake(s.cmd), isHandshake(s.ctx, s.cmd), "OnConnect's %v", s.cmd.Args())
				default:
					assert.True(t, goRedisHandshake(s.cmd), "go-redis's %T %v", s.cmd, s.cmd.Args())
					names[commandName(s.cmd)] = true
				}
			}
			assert.Equal(t, 1, callers, "the caller's command passes the hook once")
			want := []string{"hello", "select", "client setname", "client setinfo"}
			if protocol == 3 {
				want = append(want, "client maint_notifications") // go-redis's default, auto mode
			}
			for _, want := range want {
				assert.True(t, names[want], "go-redis sent no %s: %v", want, names)
			}
		})
	}
}

// The commands a caller or redisguard builds for themselves are not taken
// for go-redis's set-up ones, even when they are named like them: Do builds
// a *redis.Cmd, and admission's HELLO (askHello) names no protocol version.
func TestHandshakeLookAlikesAreNot(t *testing.T) {
	ctx := context.Background()
	for _, cmd := range []redis.Cmder{
		redis.NewMapStringInterfaceCmd(ctx, "hello"),
		redis.NewCmd(ctx, "hello", 3),
		redis.NewCmd(ctx, "auth", "pw"),
		redis.NewCmd(ctx, "select", 1),
		redis.NewCmd(ctx, "client", "setname", "x"),
		redis.NewIntCmd(ctx, "client", "id"),
		redis.NewIntCmd(ctx, "client", "unblock", 7, "error"),
	} {
		assert.False(t, goRedisHandshake(cmd), "%T %v", cmd, cmd.Args())
		assert.False(t, isHandshake(ctx, cmd), "%T %v", cmd, cmd.Args())
	}
	setUp := context.WithValue(ctx, setUpKey{}, true)
	assert.True(t, isHandshake(setUp, redis.NewCmd(ctx, "client", "setname", "x")), "named like one, from OnConnect")
	assert.False(t, isHandshake(setUp, redis.NewStatusCmd(ctx, "ping")), "OnConnect's other commands")
}

// commandName is cmd's name in lower case, with its subcommand for CLIENT.
func commandName(cmd redis.Cmder) string {
	name := strings.ToLower(cmd.Name())
	if sub, ok := argString(cmd.Args(), 1); ok && name == "client" {
		name += " " + strings.ToLower(sub)
	}
	return name
}

// sentCommand is one command a sentRecorder saw, with the context it came
// with.
type sentCommand struct {
	ctx context.Context
	cmd redis.Cmder
}

// sentRecorder is a hook that records every command, alone or in a
// pipeline, and passes it on.
type sentRecorder struct {
	mu   sync.Mutex
	sent []sentCommand
}

func (r *sentRecorder) add(ctx context.Context, cmds ...redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cmd := range cmds {
		r.sent = append(r.sent, sentCommand{ctx, cmd})
	}
}

func (r *sentRecorder) all() []sentCommand {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sentCommand(nil), r.sent...)
}

func (r *sentRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *sentRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (r *sentRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.add(ctx, cmds...)
		return next(ctx, cmds)
	}
}
