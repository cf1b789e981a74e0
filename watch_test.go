package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Watch keeps Close's promise in every mode: after Close it fails with
// ErrClosed and never runs fn (go-redis's cluster Watch would answer "redis:
// client is closed", or nil for a transaction that never ran), and a Close
// while fn runs fails the transaction's commands with ErrClosed.
func TestWatchAfterCloseIsErrClosed(t *testing.T) {
	for _, mode := range []Mode{ModeStandalone, ModeSentinel, ModeCluster} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := Config{Mode: mode}
			switch mode {
			case ModeSentinel:
				s := redistest.StartSentinel(t)
				cfg.MasterName, cfg.Addrs = s.MasterName, s.Addrs()
			case ModeCluster:
				cfg.Addrs = redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3}).Addrs()
			default:
				cfg.Addrs = []string{redistest.StartServer(t).Addr}
			}
			ctx := testCtx(t, 30*time.Second)
			const key = "watch:k"

			during := newTestClient(t, cfg)
			require.NoError(t, during.Set(ctx, key, "v", 0).Err())
			err := during.Watch(ctx, func(tx *redis.Tx) error {
				require.NoError(t, during.Close())
				require.ErrorIs(t, tx.Get(ctx, key).Err(), ErrClosed)
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Set(ctx, key, "w", 0); return nil })
				return err
			}, key)
			require.ErrorIs(t, err, ErrClosed, "Close while the transaction ran")

			used := newTestClient(t, cfg)
			require.NoError(t, used.Get(ctx, key).Err()) // the slot map (Cluster) and a connection are ready
			fresh := newTestClient(t, cfg)               // never used: no slot map yet
			for _, c := range []*Client{used, fresh} {
				require.NoError(t, c.Close())
				for range 3 {
					ran := false
					err := c.Watch(ctx, func(*redis.Tx) error { ran = true; return nil }, key)
					require.ErrorIs(t, err, ErrClosed)
					assert.False(t, ran, "fn ran after Close")
				}
			}
		})
	}
}

// go-redis's cluster Watch can end its retry loop with nil without running
// fn. Watch never passes that on as success.
func TestWatchThatNeverRanFnIsAnError(t *testing.T) {
	c, err := NewClient(Config{Mode: ModeCluster, Addrs: []string{"127.0.0.1:1"}})
	require.NoError(t, err)
	real := c.UniversalClient
	defer func() { c.UniversalClient = real; _ = c.Close() }()
	ctx := context.Background()
	fn := func(*redis.Tx) error { t.Error("fn ran"); return nil }

	c.UniversalClient = gaveUp{UniversalClient: real}
	assert.ErrorIs(t, c.Watch(ctx, fn, "k"), errWatchNotRun)

	// Close lands after Watch's own check, while go-redis's loop runs.
	c.UniversalClient = gaveUp{UniversalClient: real, during: func() { c.closed.Store(true) }}
	assert.ErrorIs(t, c.Watch(ctx, fn, "k"), ErrClosed)
}

// Inside Watch a blocking command is refused at once, with nothing sent and
// the long client untouched; queued in a transaction it is fine.
func TestWatchRejectsBlocking(t *testing.T) {
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t, redistest.ClusterOptions{Masters: 3})
	s := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"standalone", Config{Addrs: []string{srv.Addr}}},
		{"sentinel", Config{Mode: ModeSentinel, MasterName: s.MasterName, Addrs: s.Addrs()}},
		{"cluster", Config{Mode: ModeCluster, Addrs: cl.Addrs()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestClient(t, tc.cfg)
			ctx := testCtx(t, 30*time.Second)
			const key = "{watch}list"
			require.NoError(t, c.Set(ctx, "{watch}k", "1", time.Minute).Err())
			err := c.Watch(ctx, func(tx *redis.Tx) error {
				for name, call := range map[string]func() error{
					"typed": func() error { return tx.BLPop(ctx, 5*time.Second, key).Err() },
					"Do":    func() error { return tx.Do(ctx, "blpop", key, "5").Err() },
					"pipeline": func() error {
						_, err := tx.Pipelined(ctx, func(p redis.Pipeliner) error {
							p.Get(ctx, "{watch}k")
							p.BLPop(ctx, 5*time.Second, key)
							return nil
						})
						return err
					},
				} {
					start := time.Now()
					assert.ErrorIs(t, call(), ErrBlockingInWatch, name)
					assert.Less(t, time.Since(start), time.Second, "%s: the refusal was not immediate", name)
				}
				assert.ErrorIs(t, tx.Do(ctx, "subscribe", "{watch}ch").Err(), ErrHoldingCommand)
				_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.BLPop(ctx, 5*time.Second, key)
					p.Incr(ctx, "{watch}k")
					return nil
				})
				assert.ErrorIs(t, err, redis.Nil, "a transaction with BLPOP must run")
				return nil
			}, "{watch}k")
			require.NoError(t, err)
			assert.Equal(t, "2", c.Get(ctx, "{watch}k").Val())
			assert.False(t, longBuilt(c), "a command inside Watch reached the long client")

			// Outside Watch the same client still routes blocking calls.
			assert.Equal(t, redis.Nil, shortBLPop(ctx, c, key))
			assert.True(t, longBuilt(c))
		})
	}
}

// Only the Tx's own blocking commands are refused, and only while its
// transaction runs, however the hook chains were rebuilt meanwhile: a hook
// added to the client inside a Watch function leaves the client's blocking
// commands alone, during the Watch and after it, and a hook added to the Tx
// keeps refusing the Tx's.
func TestWatchRefusalIsPerTransaction(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	const key = "pertx:list"
	err := c.Watch(ctx, func(tx *redis.Tx) error {
		c.AddHook(passHook{})
		tx.AddHook(passHook{})
		assert.Equal(t, redis.Nil, shortBLPop(ctx, c, key), "the client's BLPOP inside the Watch function")
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "blpop", key, "0.05")
			return nil
		})
		assert.Equal(t, redis.Nil, err, "the client's blocking pipeline inside the Watch function")
		assert.ErrorIs(t, tx.Do(ctx, "blpop", key, "5").Err(), ErrBlockingInWatch, "the Tx's BLPOP")
		_, err = tx.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.BLPop(ctx, 5*time.Second, key)
			return nil
		})
		assert.ErrorIs(t, err, ErrBlockingInWatch, "the Tx's blocking pipeline")
		return nil
	}, key)
	require.NoError(t, err)
	assert.Equal(t, redis.Nil, shortBLPop(ctx, c, key), "a BLPOP after the Watch")
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "blpop", key, "0.05")
		return nil
	})
	assert.Equal(t, redis.Nil, err, "a blocking pipeline after the Watch")
}

// A transaction takes its connection from the ordinary client's pool, as
// go-redis's Watch does: PoolStats count it, and no other connection is
// opened for it. Instrument's extensions see the Tx's commands, on a
// client of RoleWatch.
func TestWatchSharesTheOrdinaryPoolAndExtensions(t *testing.T) {
	srv := redistest.StartServer(t)
	c := newTestClient(t, Config{Addrs: []string{srv.Addr}})
	ctx := testCtx(t, 30*time.Second)
	rec := &recorder{}
	var roles []ClientRole
	require.NoError(t, c.InstrumentRoles(func(rdb redis.UniversalClient, role ClientRole) error {
		roles = append(roles, role)
		return instrumentAll(rec)(rdb)
	}))
	assert.Equal(t, []ClientRole{RoleOrdinary, RoleWatch}, roles)

	require.NoError(t, c.Set(ctx, "share:k", "1", time.Minute).Err())
	before := *c.PoolStats()
	require.Equal(t, uint32(1), before.TotalConns)
	err := c.Watch(ctx, func(tx *redis.Tx) error {
		n, err := tx.Get(ctx, "share:k").Int()
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "share:k", n+1, time.Minute)
			return nil
		})
		return err
	}, "share:k")
	require.NoError(t, err)
	after := *c.PoolStats()
	assert.Equal(t, uint32(1), after.TotalConns, "the transaction's connection is the pool's")
	assert.Greater(t, after.Hits, before.Hits, "the transaction took the pooled connection")

	cmds, pipes, _ := rec.seen()
	assert.Equal(t, 1, count(cmds, "watch ok"), "%q", cmds)
	assert.Equal(t, 1, count(cmds, "get ok"), "%q", cmds)
	assert.Equal(t, 1, count(pipes, "multi set exec"), "%q", pipes)
}
