package redisguard

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSubscriptionSetFollowsCommands(t *testing.T) {
	cmd := func(args ...string) string { // RESP, as go-redis writes it
		s := "*" + strconv.Itoa(len(args)) + "\r\n"
		for _, a := range args {
			s += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
		}
		return s
	}
	tests := []struct {
		name    string
		writes  []string
		names   string
		changed bool // by the last write
	}{
		{"subscribe", []string{cmd("subscribe", "a", "b")}, "channel a, channel b", true},
		{"every kind", []string{cmd("subscribe", "a"), cmd("psubscribe", "p*"), cmd("ssubscribe", "{s}x")},
			"channel a, pattern p*, shard channel {s}x", true},
		{"two commands in one write", []string{cmd("subscribe", "a") + cmd("PSUBSCRIBE", "p*")}, "channel a, pattern p*", true},
		{"unsubscribe one", []string{cmd("subscribe", "a", "b"), cmd("unsubscribe", "a")}, "channel b", true},
		{"unsubscribe all", []string{cmd("subscribe", "a", "b"), cmd("psubscribe", "p*"), cmd("unsubscribe")}, "pattern p*", true},
		{"other commands", []string{cmd("subscribe", "a"), cmd("ping")}, "channel a", false},
		{"a channel named like a command", []string{cmd("subscribe", "subscribe\r\n")}, "channel subscribe\r\n", true},
		{"cut short", []string{cmd("subscribe", "a"), cmd("subscribe", "b")[:10]}, "channel a", false},
		{"not RESP", []string{"subscribe\r\n"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c subscriptionConn
			changed := false
			for _, w := range tt.writes {
				_, changed = c.follow([]byte(w))
			}
			s := c.subs
			assert.Equal(t, tt.names, s.names())
			assert.Equal(t, tt.changed, changed)
			assert.Equal(t, tt.names == "", s.key() == "")
		})
	}
}
