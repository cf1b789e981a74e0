package redisguard

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// AddHook adds a go-redis hook that sees every command the Client runs:
// ordinary commands, blocking ones (which run on connections of their own),
// pipelines and transactions, each once, with the error the caller gets
// (ErrNodeUnavailable, ctx.Err(), ...). Its DialHook sees every connection
// the Client opens for commands and subscriptions. A hook added at any time
// reaches every later command, including those of Pipelines, Txs and
// AutoPipeliners made before.
//
// Hooks run in the order added, the first outermost, outside redisguard's
// own (docs/architecture.md, "Hook order"), as go-redis runs the hooks of
// one client. To hook a single node client, use ForEachShard or
// ClusterClient's OnNewNode.
func (c *Client) AddHook(hook redis.Hook) { c.hooks.user.add(hook) }

// Instrument applies a go-redis extension, such as redisotel's
// InstrumentTracing or InstrumentMetrics:
//
//	err := c.Instrument(func(rdb redis.UniversalClient) error {
//		return redisotel.InstrumentTracing(rdb)
//	})
//
// fn is called now with each go-redis client the Client runs for the
// user's commands (the ordinary client, the one Watch transactions run on
// in Standalone and Sentinel mode, and the long client once a blocking
// call has built it), and later with every such client the Client builds:
// the long client, the clients of blocking calls' dedicated connections,
// and those subscriptions run on.
// It returns fn's first error; if fn fails on the ordinary client, fn is not
// kept. A later client fn fails on is used as it is, and the failure logged.
// InstrumentRoles also tells fn which client it is given.
//
// The clients fn sees are go-redis's own (*redis.Client, or
// *redis.ClusterClient in Cluster mode, whose extensions hook node clients
// as go-redis creates them: call Instrument before the first command, as
// with go-redis). Hooks fn adds sit inside redisguard's: they see the
// command go-redis sends and the error go-redis returns, before redisguard
// translates it; a blocking command is seen on its dedicated connection.
// The internal clients that only check on nodes (recovery probes, the
// questions to sentinels) are not given to fn: they carry no user command,
// and tracing every probe of a node that is down would flood the traces.
// The few commands redisguard sends on the clients fn does see (health
// checks' round trips, CLIENT UNBLOCK, replicas' lag questions) are
// reported by IsOwnCommand, for an extension to leave out.
//
// Each dedicated connection runs on a go-redis client of its own, kept
// after the connection closes for the next one to the same node: an
// extension that keeps state per client (redisotel's InstrumentMetrics
// registers a pool-statistics callback) keeps it for at most as many
// clients per node as there were blocking calls on it at once.
//
// fn must not use the Client: it runs while the Client holds the locks that
// keep a long, dedicated or sharded-subscription client built meanwhile
// from missing fn, and a blocking call or subscription made from fn waits
// for them forever. go-redis's extensions only install hooks.
func (c *Client) Instrument(fn func(redis.UniversalClient) error) error {
	if fn == nil {
		return invalid("Instrument", "needs a function")
	}
	return c.InstrumentRoles(func(rdb redis.UniversalClient, _ ClientRole) error { return fn(rdb) })
}

// InstrumentRoles is Instrument with each client's role, for an extension
// that labels what it reports: redisotel's pool metrics, named after the
// client's address by default, would add up the pools of every client of
// one address.
func (c *Client) InstrumentRoles(fn func(rdb redis.UniversalClient, role ClientRole) error) error {
	if fn == nil {
		return invalid("InstrumentRoles", "needs a function")
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if c.pending != nil {
		return c.pending.instrument(fn, func() error { return c.instrument(fn) })
	}
	return c.instrument(fn)
}

// ClientRole names the part a go-redis client given to Instrument's
// function plays. Each role's clients have pools of their own.
type ClientRole string

const (
	// RoleOrdinary is the client every command enters, with
	// Config.MaxConnections per node; in Cluster mode, its node clients.
	RoleOrdinary ClientRole = "ordinary"
	// RoleLong runs blocking calls' batches and redirects, and CLIENT
	// UNBLOCK (Config.MaxLongConnections).
	RoleLong ClientRole = "long"
	// RoleDedicated is one blocking call's connection to one node, a pool of
	// one; a node has as many as it had blocking calls at once.
	RoleDedicated ClientRole = "dedicated"
	// RoleSharded runs a Cluster-mode Client's sharded subscriptions.
	RoleSharded ClientRole = "sharded"
	// RoleSubscriptions runs the subscriptions of Subscribe and PSubscribe.
	RoleSubscriptions ClientRole = "subscriptions"
	// RoleReplica serves the reads of a Sentinel-managed master's replica
	// (Config.ReadFrom).
	RoleReplica ClientRole = "replica"
	// RoleWatch runs the transactions of Watch in Standalone and Sentinel
	// mode, a go-redis clone of the ordinary client that shares its pools:
	// its PoolStats are the ordinary client's. (In Cluster mode a
	// transaction runs on a node client of the ordinary client.)
	RoleWatch ClientRole = "watch"
)

// IsOwnCommand reports whether cmd is one redisguard sends itself on a
// client that Instrument's extensions and AddHook's hooks see: a health
// check's round trip, a CLIENT UNBLOCK that ends a cancelled blocking call,
// a replica's lag question, a PING that asks whether a node claiming a slot
// answers. A tracing or metrics extension can leave them out, as
// redisguardotel's does; the service sent none of them.
func IsOwnCommand(cmd redis.Cmder) bool {
	switch cmd.(type) {
	case oneShot, ownCmd:
		return true
	}
	return false
}

// ownCmd marks a command redisguard sends itself (IsOwnCommand); oneShot
// marks one that is not retried, too.
type ownCmd struct{ *redis.Cmd }

// instrument applies fn to c's own clients and keeps it for later ones.
func (c *Client) instrument(fn func(redis.UniversalClient, ClientRole) error) error {
	return c.adm.instrument(func(long redis.UniversalClient) error {
		return c.subs.withClients(func(sharded *redis.ClusterClient, classic redis.UniversalClient) error {
			if err := c.hooks.ext.add(fn, c.UniversalClient); err != nil {
				return err
			}
			if c.watch != nil {
				if err := fn(c.watch, RoleWatch); err != nil {
					return err
				}
			}
			if long != nil {
				if err := fn(long, RoleLong); err != nil {
					return err
				}
			}
			if classic != nil {
				if err := fn(classic, RoleSubscriptions); err != nil {
					return err
				}
			}
			if sharded != nil {
				return fn(sharded, RoleSharded)
			}
			return nil
		})
	})
}

// userHooks holds the hooks added with Client.AddHook, as an immutable
// snapshot. Every go-redis client a Client runs carries a userLayer as its
// outermost hook, which runs the snapshot's hooks around the rest of the
// chain: a hook added later reaches clients, Txs and Conns made before,
// which go-redis's own AddHook does not.
type userHooks struct {
	mu    sync.Mutex                   // serialises add
	hooks atomic.Pointer[[]redis.Hook] // nil until the first hook
}

func (u *userHooks) add(h redis.Hook) {
	if h == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var list []redis.Hook
	if old := u.hooks.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, h)
	u.hooks.Store(&list)
}

// layer returns the hook a go-redis client carries outermost. commands is
// set on the ordinary client, where every command enters: the user's
// process and pipeline hooks run there, once per command, and on no other
// client, where they would see a blocking command twice. Every client runs
// the user's dial hooks.
func (u *userHooks) layer(commands bool) userLayer { return userLayer{u: u, commands: commands} }

// subscriptionLayer is the layer of a Standalone or Sentinel subscriptions
// client: the user's hooks see its connections' handshakes, as they see
// the ordinary client's, and nothing puts a set-up mark back on their
// errors, since a subscription's guard puts none (nodeGuard.subscriptions).
func (u *userHooks) subscriptionLayer() userLayer {
	return userLayer{u: u, commands: true, subscriptions: true}
}

type userLayer struct {
	u             *userHooks
	commands      bool
	subscriptions bool
}

func (l userLayer) DialHook(next redis.DialHook) redis.DialHook {
	w := around(l.u, next, func(h redis.Hook, next redis.DialHook) redis.DialHook { return h.DialHook(next) })
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return w.get()(ctx, network, addr)
	}
}

func (l userLayer) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if !l.commands {
		return next
	}
	w := l.u.process(next)
	if l.subscriptions {
		w.seal = nil
	}
	return func(ctx context.Context, cmd redis.Cmder) error { return w.get()(ctx, cmd) }
}

func (l userLayer) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if !l.commands {
		return next
	}
	w := l.u.pipeline(next)
	if l.subscriptions {
		w.seal = nil
	}
	return func(ctx context.Context, cmds []redis.Cmder) error { return w.get()(ctx, cmds) }
}

// process returns next wrapped in u's current process hooks (see wrapped);
// the userLayer and, in Standalone mode, the node guard run the user's
// hooks through it.
//
// The user's hooks see the errors of go-redis's handshake commands as
// go-redis returns them, without the set-up mark (setup.go), which the
// chain puts back for the guard that waits above.
func (u *userHooks) process(next redis.ProcessHook) *wrapped[redis.ProcessHook] {
	w := around(u, next, func(h redis.Hook, next redis.ProcessHook) redis.ProcessHook { return h.ProcessHook(next) })
	w.strip, w.seal = stripProcess, sealProcess
	return w
}

// pipeline is process for pipeline hooks.
func (u *userHooks) pipeline(next redis.ProcessPipelineHook) *wrapped[redis.ProcessPipelineHook] {
	w := around(u, next, func(h redis.Hook, next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return h.ProcessPipelineHook(next)
	})
	w.strip, w.seal = stripPipeline, sealPipeline
	return w
}

// stripProcess is next as the user's innermost hook calls it: the set-up
// mark removed.
func stripProcess(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return withoutSetup(next(ctx, cmd)) }
}

// sealProcess is the user's chain, the set-up mark put back.
func sealProcess(chain redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return remarkHandshake(ctx, cmd, chain(ctx, cmd)) }
}

func stripPipeline(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return withoutSetup(next(ctx, cmds)) }
}

func sealPipeline(chain redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := chain(ctx, cmds)
		if len(cmds) == 0 {
			return err
		}
		return remarkHandshake(ctx, cmds[0], err)
	}
}

// wrapped is next wrapped in u's current hooks, the first outermost. The
// chain is built once per snapshot of the hooks and cached, so a command
// costs an atomic load or two and allocates nothing. wrap, which must
// capture nothing, may return nil, which go-redis reads as "this hook
// leaves the step alone".
//
// One allocation: go-redis's AutoPipeliner builds its client's hook chain
// again for every batch it sends, and so every hook's chain with it.
type wrapped[F any] struct {
	u     *userHooks
	next  F
	wrap  func(redis.Hook, F) F
	strip func(F) F // if set, next as the innermost hook calls it
	seal  func(F) F // if set, around a built chain
	cur   atomic.Pointer[userChain[F]]
}

// userChain is a chain that wrapped built, and the hooks it was built from.
type userChain[F any] struct {
	from *[]redis.Hook
	fn   F
}

func around[F any](u *userHooks, next F, wrap func(redis.Hook, F) F) *wrapped[F] {
	return &wrapped[F]{u: u, next: next, wrap: wrap}
}

// get returns the chain for u's current hooks.
func (w *wrapped[F]) get() F {
	hooks := w.u.hooks.Load()
	if hooks == nil {
		return w.next
	}
	if c := w.cur.Load(); c != nil && c.from == hooks {
		return c.fn
	}
	fn := w.next
	if w.strip != nil {
		fn = w.strip(fn)
	}
	for i := len(*hooks) - 1; i >= 0; i-- {
		if h := w.wrap((*hooks)[i], fn); !isNilFunc(h) {
			fn = h
		}
	}
	if w.seal != nil {
		fn = w.seal(fn)
	}
	w.cur.Store(&userChain[F]{from: hooks, fn: fn})
	return fn
}

// isNilFunc reports whether f, one of go-redis's hook function types, is nil.
func isNilFunc[F any](f F) bool {
	switch f := any(f).(type) {
	case redis.DialHook:
		return f == nil
	case redis.ProcessHook:
		return f == nil
	case redis.ProcessPipelineHook:
		return f == nil
	}
	return false
}

// extensions holds the functions given to Client.Instrument, which every
// go-redis client built later for user commands gets (see newGoRedis).
type extensions struct {
	k   *core
	mu  sync.Mutex
	fns []func(redis.UniversalClient, ClientRole) error // guarded by mu
}

// add applies fn to ordinary and keeps it for later clients if that worked.
func (e *extensions) add(fn func(redis.UniversalClient, ClientRole) error, ordinary redis.UniversalClient) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := fn(ordinary, RoleOrdinary); err != nil {
		return err
	}
	e.fns = append(e.fns, fn)
	return nil
}

// each calls fn with every kept function.
func (e *extensions) each(fn func(func(redis.UniversalClient, ClientRole) error)) {
	e.mu.Lock()
	fns := append([]func(redis.UniversalClient, ClientRole) error(nil), e.fns...)
	e.mu.Unlock()
	for _, f := range fns {
		fn(f)
	}
}

// apply runs every kept function on cl, a client of role just built.
func (e *extensions) apply(cl redis.UniversalClient, role ClientRole) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, fn := range e.fns {
		if err := fn(cl, role); err != nil {
			e.k.log.Warn("redisguard: an Instrument extension failed on a new client; it runs without it",
				"err", e.k.redact(err.Error()))
		}
	}
}
