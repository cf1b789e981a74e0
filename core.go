package redisguard

import (
	"log/slog"
	"sync/atomic"

	"github.com/redisguard/redisguard/internal/clock"
)

// core is what the client's components share: the resolved Config, the
// clock, the logger and event sink (events.go), and the closed flag. Each
// component holds a *core and the components it was built with (newClient);
// none holds the *Client.
type core struct {
	cfg    Config // resolved: every default filled in
	clock  clock.Clock
	log    *slog.Logger // never nil
	closed atomic.Bool  // set once by Client.Close
}

func newCore(cfg Config, clk clock.Clock) *core {
	k := &core{cfg: cfg, clock: clk, log: cfg.Logger}
	if k.log == nil {
		k.log = slog.New(slog.DiscardHandler)
	}
	return k
}
