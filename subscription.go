package redisguard

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// subscriptionBudget is installed on the ordinary client (on each node
// client in Cluster mode). go-redis dials PubSub connections through the
// client's dial hook, from PubSubPool.NewConn: one on the first subscribe,
// one per reconnect, and closes the old one before it redials. Taking the
// permit at that dial and giving it back when that connection is closed is
// therefore exactly "held while the subscription runs": an unused
// Subscribe() dials nothing, Unsubscribe keeps the connection, and
// PubSub.Close (or Client.Close) closes it. A dial for the ordinary pool
// shares the hook and passes straight through.
type subscriptionBudget struct{ a *admission }

// pubSubDialer is the go-redis function on the stack of every PubSub dial
// and of no other. go-redis offers no other way to tell the two dials
// apart; the subscription tests fail if an upgrade renames it.
const pubSubDialer = "github.com/redis/go-redis/v9/internal/pool.(*PubSubPool).NewConn"

func (h subscriptionBudget) DialHook(next redis.DialHook) redis.DialHook {
	a := h.a
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !onStack(pubSubDialer) {
			return next(ctx, network, addr)
		}
		if err := a.acquire(ctx); err != nil {
			return nil, err
		}
		conn, err := next(ctx, network, addr)
		if err != nil {
			a.release()
			return nil, err
		}
		return &subscriptionConn{Conn: conn, a: a}, nil
	}
}

func (subscriptionBudget) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (subscriptionBudget) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// subscriptionConn gives its permit back on its first Close.
type subscriptionConn struct {
	net.Conn
	a        *admission
	released atomic.Bool
}

func (c *subscriptionConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		c.a.release()
	}
	return err
}

// NetConn lets go-redis reach the socket underneath, as it does through TLS,
// to peek for pending push data.
func (c *subscriptionConn) NetConn() net.Conn { return c.Conn }
