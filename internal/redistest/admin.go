package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// Admin returns the server's admin client: a plain go-redis client (RESP2,
// no retries, 2s timeouts) that never goes through redisguard. It is created
// once, survives Kill and Restart (go-redis redials), and is closed by the
// test's cleanup.
func (s *Server) Admin() *redis.Client { return s.p.Admin() }

// Info returns INFO section (all default sections if empty) as a map; the
// test fails if the server does not answer.
func (s *Server) Info(t testing.TB, section string) map[string]string {
	t.Helper()
	m, err := s.p.Info(section)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
