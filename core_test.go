package redisguard

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/redisguard/redisguard/internal/clock"
)

// Both configured passwords are removed from any text an event, a log line
// or a health report carries; an empty one removes nothing.
func TestCoreRedactsEveryConfiguredSecret(t *testing.T) {
	tests := []struct {
		name, password, sentinel, text, want string
	}{
		{"both", "s3cret", "sent1nel", "auth s3cret then sent1nel", "auth [redacted] then [redacted]"},
		{"repeated", "pw-x", "", "pw-x:pw-x", "[redacted]:[redacted]"},
		{"none configured", "", "", "nothing s3cret here", "nothing s3cret here"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newCore(Config{Password: tt.password, SentinelPassword: tt.sentinel}, clock.Real())
			assert.Equal(t, tt.want, k.redact(tt.text))
		})
	}
}

// A core always has a logger, so components log without checking.
func TestCoreDefaultsToADiscardingLogger(t *testing.T) {
	k := newCore(Config{}, clock.Real())
	assert.NotNil(t, k.log)
	k.log.Info("goes nowhere")
}
