package redisguard

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// helloInfo is what a bare HELLO (no protocol version, so nothing about the
// connection changes) says of the server and of the connection it is sent
// on. It carries the facts ROLE, INFO cluster and CLIENT ID would, but
// every user may send it: HELLO is the command that authenticates, so ACL
// rules never deny it. Redis answers it from 6.2 on; an older server or a
// proxy answers with an error reply, and the caller falls back to the
// command that carries the fact alone.
type helloInfo struct {
	role string // "master" or "replica"
	mode string // "standalone", "cluster" or "sentinel"
	id   int64  // the connection's client id, as CLIENT ID answers; 0 if not given
}

// askHello sends a bare HELLO through send and reads its reply, a map in
// RESP3 and a flat list of names and values in RESP2: go-redis's map reply
// reads both.
func askHello(ctx context.Context, send func(context.Context, redis.Cmder) error) (helloInfo, error) {
	cmd := redis.NewMapStringInterfaceCmd(ctx, "hello")
	if err := send(ctx, cmd); err != nil {
		return helloInfo{}, err
	}
	return parseHello(cmd.Val()), nil
}

// parseHello reads the fields of a HELLO reply that redisguard uses;
// missing or mistyped ones stay zero.
func parseHello(m map[string]interface{}) helloInfo {
	var h helloInfo
	h.role, _ = m["role"].(string)
	h.mode, _ = m["mode"].(string)
	h.id, _ = m["id"].(int64)
	return h
}
