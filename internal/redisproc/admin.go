package redisproc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// adminTimeout is the dial, read and write timeout of admin clients, and
	// the budget of each command the harness sends. Short, so that a paused
	// server shows up as an error quickly instead of stalling a poll.
	adminTimeout = 2 * time.Second

	// adminPoolSize is generous for a client that issues one command at a
	// time because go-redis counts failed dials against it: after that many
	// failures (ever) the pool refuses to dial until a background probe gets
	// through, which would make a restarted server look dead for a second.
	adminPoolSize = 16
)

// Admin returns the server's admin client: a plain go-redis client (RESP2,
// no retries, 2s timeouts) that never goes through redisguard. It is created
// once, survives Kill and Restart (go-redis redials), and is closed by Close;
// after Close it is handed out closed, so its commands fail with
// redis.ErrClosed.
func (s *Server) Admin() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		return s.admin
	}
	c := newAdminClient(s.Addr)
	if s.closed {
		// Too late to be cleaned up: hand out a closed client, whose
		// commands fail with redis.ErrClosed, rather than leak one.
		_ = c.Close()
		return c
	}
	s.admin = c
	return c
}

func newAdminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr,
		// RESP2 and no maintenance notifications: nothing arrives on the
		// connection that was not asked for, and it works with sentinels.
		Protocol:                 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DisableIdentity:          true,
		DialTimeout:              adminTimeout,
		DialerRetries:            1,
		ReadTimeout:              adminTimeout,
		WriteTimeout:             adminTimeout,
		ContextTimeoutEnabled:    true,
		// A failed admin command should fail once and quickly; callers that
		// expect transient errors poll.
		MaxRetries: -1,
		PoolSize:   adminPoolSize,
	})
}

// Info returns INFO section (all default sections if empty) as a map.
func (s *Server) Info(section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	m, err := infoMap(ctx, s.Admin(), section)
	if err != nil {
		return nil, fmt.Errorf("redisproc: INFO %s on %s: %w", section, s.Addr, err)
	}
	return m, nil
}

func infoMap(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	var sections []string
	if section != "" {
		sections = append(sections, section)
	}
	text, err := c.Info(ctx, sections...).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(text), nil
}

// parseInfo parses the "key:value" lines of INFO and CLUSTER INFO.
func parseInfo(text string) map[string]string {
	m := make(map[string]string)
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}
