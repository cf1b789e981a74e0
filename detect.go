package redisguard

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxDetectWait bounds each step of the first contact that tells a cluster
// node from a standalone server: NewClient must not hang for the full
// DialTimeout on a server that does not answer.
const maxDetectWait = time.Second

// detectMode settles ModeAuto with one address: it asks the server once
// whether it runs as a cluster node. It reports the mode to run in, and the
// contact's failure when the server could not be asked; the client then
// runs Standalone until the server's first answer (detect_pending.go). opt
// is the handshake every client uses.
//
// The question is a bare HELLO, whose reply names the server's mode and
// which every user may send (hello.go); INFO cluster, which an
// application's user is usually denied (INFO is @dangerous), is asked only
// of a server that cannot answer HELLO so.
func detectMode(cfg Config, opt *redis.Options) (mode Mode, contact error) {
	wait := min(cfg.DialTimeout, maxDetectWait)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	noDB := *opt
	noDB.DB = 0 // a cluster node refuses SELECT
	mode = ModeStandalone
	probeConn(ctx, &noDB, cfg.Addrs[0], wait, func(cl *redis.Client) {
		hello, err := askHello(ctx, cl.Process)
		switch {
		case err == nil && hello.mode != "":
			if hello.mode == "cluster" {
				mode = ModeCluster
			}
			return
		case err != nil && (!isRedisReply(err) || refusedUs(err)):
			contact = err // the connection or its handshake failed: nothing was asked
			return
		}
		text, err := cl.Info(ctx, "cluster").Result()
		switch {
		case err == nil:
			if infoField(text, "cluster_enabled") == "1" {
				mode = ModeCluster
			}
		case !isRedisReply(err) || refusedUs(err):
			contact = err
		}
		// Any other error reply: a server without INFO cluster is no cluster node.
	})
	return mode, contact
}

// applyDetected fixes up cfg for the mode a single address turned out to be.
func applyDetected(cfg *Config, mode Mode) error {
	cfg.Mode = mode
	if err := cfg.validateReadFrom(); err != nil {
		return err
	}
	if mode != ModeCluster {
		return cfg.validateClusterOnly()
	}
	if cfg.DB != 0 {
		return invalid("DB", "is %d, but %s is a cluster node and Redis Cluster only has database 0", cfg.DB, cfg.Addrs[0])
	}
	if cfg.caching() {
		return invalid("ClientSideCacheConfig", "is set, but %s is a cluster node and go-redis v9.23 caches only on a single-server client", cfg.Addrs[0])
	}
	if t := cfg.TLSConfig; t != nil && t.ServerName != "" {
		// A server name taken from the seed's host (ParseURL sets one for a
		// single host) would fail verification on every other node.
		host, _, _ := net.SplitHostPort(cfg.Addrs[0])
		if t.ServerName == host {
			c := t.Clone()
			c.ServerName = ""
			cfg.TLSConfig = c
		}
	}
	return nil
}

// refusedUs reports whether a reply refused the client rather than answered
// the question: credentials, ACL permissions, the server's client limit.
func refusedUs(err error) bool {
	msg := err.Error()
	for _, p := range []string{"NOAUTH", "WRONGPASS", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.Contains(msg, "max number of clients")
}
