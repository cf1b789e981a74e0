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
// (INFO cluster) whether cluster support is enabled. It reports the mode to
// run in, or ModeAuto and why, when the server gave no answer that tells;
// opt is the handshake every client uses.
func detectMode(cfg Config, opt *redis.Options) (Mode, error) {
	wait := min(cfg.DialTimeout, maxDetectWait)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	noDB := *opt
	noDB.DB = 0 // a cluster node refuses SELECT
	cmd, err := probeAddr(ctx, &noDB, cfg.Addrs[0], wait, "info", "cluster")
	if err != nil {
		if isRedisReply(err) && !refusedUs(err) {
			return ModeStandalone, nil // a server without INFO cluster is no cluster node
		}
		return ModeAuto, err
	}
	text, _ := cmd.Val().(string)
	if infoField(text, "cluster_enabled") == "1" {
		return ModeCluster, nil
	}
	return ModeStandalone, nil
}

// applyDetected fixes up cfg for the mode a single address turned out to be.
func applyDetected(cfg *Config, mode Mode) error {
	cfg.Mode = mode
	if err := cfg.validateReadFrom(); err != nil {
		return err
	}
	if mode != ModeCluster {
		return nil
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
