package redisguard

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// quietDial is the hook of the probe and sentinel-question clients: it
// dials their connection itself, before a command reaches go-redis's pool,
// and the pool's dial takes that connection. go-redis logs every failed
// pool dial ("connection pool: failed to dial after 1 attempts") through
// its process-wide logger, which belongs to the user (LogGoRedisTo); a
// probe of a node that is down fails its dial every time by design, about
// once a second per node, and none of those failures may become a line on
// stderr. A dial of quietDial's fails as the command's own error, which
// the caller reports (a probe's failure is an event at debug level), and
// go-redis never sees it.
//
// It dials before a command when the client may have no connection: before
// the first, and after one that failed other than by a reply (go-redis
// then drops the connection). A connection the pool did not take is closed
// once the command returns. The clients it serves send one command at a
// time.
type quietDial struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error) // the client's Dialer
	network string
	addr    string
	timeout time.Duration // DialTimeout, which go-redis applies to each dial too

	mu     sync.Mutex
	needed bool     // guarded by mu; the pool may have no connection
	conn   net.Conn // guarded by mu; dialled and not yet taken by the pool
}

// newQuietDial returns the hook for a client built from opt, as go-redis
// completed it (Dialer, Network).
func newQuietDial(opt *redis.Options) *quietDial {
	return &quietDial{dial: opt.Dialer, network: opt.Network, addr: opt.Addr, timeout: opt.DialTimeout, needed: true}
}

func (q *quietDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		q.mu.Lock()
		conn := q.conn
		q.conn = nil
		q.mu.Unlock()
		if conn != nil {
			return conn, nil
		}
		return next(ctx, network, addr)
	}
}

func (q *quietDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := q.before(ctx); err != nil {
			return err
		}
		err := next(ctx, cmd)
		q.after(err)
		return err
	}
}

func (q *quietDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := q.before(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		err := next(ctx, cmds)
		q.after(err)
		return err
	}
}

// before dials, if the pool may need a connection.
func (q *quietDial) before(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.needed || q.conn != nil {
		return nil
	}
	dctx := ctx
	if q.timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, q.timeout)
		defer cancel()
	}
	conn, err := q.dial(dctx, q.network, q.addr)
	if err != nil {
		return err
	}
	q.conn, q.needed = conn, false
	return nil
}

// after notes whether the command's connection survived it, and closes a
// connection the pool did not take.
func (q *quietDial) after(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn != nil {
		_ = q.conn.Close()
		q.conn = nil
	}
	if err != nil && err != redis.Nil && !isRedisReply(err) {
		q.needed = true
	}
}
