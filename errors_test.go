package redisguard

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

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

func TestErrorsAreNotRetryableToGoRedis(t *testing.T) {
	// go-redis decides retries by Timeout() methods, net.Error and
	// pool.ErrPoolTimeout; our sentinels must look like none of them.
	for _, err := range []error{ErrClosed, ErrInvalidConfig, ErrNodeUnavailable, ErrPoolExhausted,
		ErrClusterFailover, ErrSlotMapCorruption, ErrOutcomeUnknown, &NodeError{Addr: "a:1", Err: ErrNodeUnavailable}} {
		var timeout interface{ Timeout() bool }
		assert.False(t, errors.As(err, &timeout), "%v has a Timeout method", err)
		assert.False(t, errors.Is(err, redis.ErrPoolTimeout), "%v wraps the pool timeout", err)
	}
	ne := &NodeError{Addr: "10.0.0.1:6379", Err: ErrNodeUnavailable}
	assert.ErrorIs(t, fmt.Errorf("wrapped: %w", ne), ErrNodeUnavailable)
	assert.Contains(t, ne.Error(), "10.0.0.1:6379")
}

// ErrClosed is redisguard's own value, and errors.Is takes it for go-redis's
// closed error too, wrapped or not; go-redis's is not redisguard's.
func TestErrClosedMatchesGoRedisClosed(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"ErrClosed is redis.ErrClosed", ErrClosed, redis.ErrClosed, true},
		{"wrapped ErrClosed is redis.ErrClosed", fmt.Errorf("op: %w", ErrClosed), redis.ErrClosed, true},
		{"ErrClosed is itself", ErrClosed, ErrClosed, true},
		{"redis.ErrClosed is not ErrClosed", redis.ErrClosed, ErrClosed, false},
		{"ErrClosed is no other sentinel", ErrClosed, ErrNodeUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, errors.Is(tt.err, tt.target))
		})
	}
	assert.NotEqual(t, redis.ErrClosed, ErrClosed, "ErrClosed is a value of its own")
}
