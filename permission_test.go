package redisguard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A refusal is a reply that says the command will not run for this user or
// on this server, whenever it is asked; anything else may answer next time.
func TestIsRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"NOPERM", redisErr("NOPERM this user has no permissions to run the 'command' command"), true},
		// A connection whose set-up was refused (CLIENT SETNAME) did not
		// ask the question at all.
		{"NOPERM of the connection's set-up", fmt.Errorf("failed to initialize connection options: %w",
			redisErr("NOPERM this user has no permissions to run the 'client|setname' command")), false},
		{"unknown command", redisErr("ERR unknown command 'role', with args beginning with: "), true},
		{"unknown subcommand", redisErr("ERR unknown subcommand 'unblock'. Try CLIENT HELP."), true},
		{"wrong number of arguments", redisErr("ERR wrong number of arguments for 'hello' command"), false},
		{"LOADING", redisErr("LOADING Redis is loading the dataset in memory"), false},
		{"WRONGPASS", redisErr("WRONGPASS invalid username-password pair or user is disabled."), false},
		{"timeout", context.DeadlineExceeded, false},
		{"NOPERM text, not a reply", errors.New("NOPERM"), false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, isRefusal(tc.err))
		})
	}
}

// However many callers meet the refusal at once, it is logged once, at
// warn, naming the command and the rule to grant, and without the
// password a server's reply might quote.
func TestDenialLogsTheFirstRefusalOnly(t *testing.T) {
	var l eventLog
	k := newCore(Config{Password: "s3cret", Logger: l.logger()}, nil)
	q := question{"client|unblock", "the connection is closed instead"}
	var d denial
	assert.False(t, d.refusedBy(k, q, "a:1", context.DeadlineExceeded), "a timeout is no refusal")
	assert.False(t, d.refusedBy(k, q, "a:1", redisErr("LOADING Redis is loading")), "LOADING is no refusal")
	assert.False(t, d.refused())

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			assert.True(t, d.refusedBy(k, q, "a:1", redisErr("NOPERM no permissions to run 'client|unblock' (s3cret)")))
		})
	}
	wg.Wait()
	assert.True(t, d.refused())
	_, lines := l.all()
	if assert.Len(t, lines, 1) {
		line := lines[0]
		assert.Equal(t, "WARN", line.level.String())
		assert.Contains(t, line.msg, "the connection is closed instead")
		assert.Equal(t, "CLIENT UNBLOCK", line.attrs["command"])
		assert.Equal(t, "+client|unblock", line.attrs["grant"])
		assert.Equal(t, "a:1", line.attrs["addr"])
		assert.NotContains(t, line.attrs["err"], "s3cret")
	}
}

// refusals counts the warn lines a client logged for a command of its own
// that a server refused, by the command they name ("COMMAND", "CLIENT UNBLOCK").
func refusals(l *eventLog) map[string]int {
	_, lines := l.all()
	out := map[string]int{}
	for _, line := range lines {
		if strings.HasPrefix(line.msg, "redisguard: a server refused a command the client sends for itself") {
			out[line.attrs["command"]]++
		}
	}
	return out
}
