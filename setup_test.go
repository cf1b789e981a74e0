package redisguard

import (
	"context"
	"errors"
	"io"
	"net"
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

// wrapOnce wraps an error one level, as go-redis's handshake error does.
type wrapOnce struct{ err error }

func (w wrapOnce) Error() string { return "handshake: " + w.err.Error() }
func (w wrapOnce) Unwrap() error { return w.err }

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
