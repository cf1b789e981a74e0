package redisguard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard/internal/redistest"
)

// The chaos soak's workload (chaos_test.go): 100 goroutines and what they
// record. The once-only writers and their check are in chaos_once_test.go.

// chaosWorld is the workload and what it recorded.
type chaosWorld struct {
	c, side *Client
	acl     *Client        // the cluster client of chaosACLUser, denied CLIENT UNBLOCK and CLIENT KILL
	nodeOf  map[string]int // node address -> shard, for errors that name their node

	// auto and aclAuto are c's and acl's autopipeliners, each shared by
	// the once-only writers on that client.
	auto, aclAuto *redis.AutoPipeliner

	// shardOf maps each slot to its shard now: a snapshot, replaced whole
	// when the resharding step moves a slot (moveSlot).
	shardOf atomic.Pointer[[]int]
	homesMu sync.Mutex
	homes   map[int][]int // guarded by homesMu: the shards a moved slot lived on before

	onceMu    sync.Mutex
	once      []*onceWriter // guarded by onceMu
	onceSlots []int         // the slots of the once-only writers' keys, which the resharding step moves

	faults faultWindows
	stalls stallMeter // the process's own lateness: an overrun within it is not the client's

	// Per-key acknowledged state: each key has one writer, and its values
	// only grow, so a read-back must find at least the last acknowledged.
	ackMu sync.Mutex
	acked map[string]int64 // guarded by ackMu

	popMu sync.Mutex
	items map[uint32]itemRec // guarded by popMu: every item pushed or popped, by itemID

	mu              sync.Mutex
	counts          map[string]int // guarded by mu: outcome counts by "kind/class"
	replies         map[string]int // guarded by mu: Redis error replies by their first word
	okBy            map[string]int // guarded by mu
	samples         []string       // guarded by mu: the first violations, for the report
	untyped         int            // guarded by mu
	redirects       int            // guarded by mu
	refusals        int            // guarded by mu
	netHealthy      int            // guarded by mu
	netFaulted      int            // guarded by mu
	overruns        int            // guarded by mu
	worstOverrun    time.Duration  // guarded by mu
	ops, ok         int            // guarded by mu
	suspects        []suspect      // guarded by mu
	overrunsCrashed int            // guarded by mu
	overrunsPaused  int            // guarded by mu
	overrunsStalled int            // guarded by mu

	panics, received, published atomic.Int64
	// pubAt and recvAt are the subscriberSlots in which a message on
	// chaosChannel was published and received.
	subMu         sync.Mutex
	pubAt, recvAt map[int64]bool // guarded by subMu
	// shardChannels has a shard channel on each shard, by shard index;
	// shardPubAt and shardRecvAt are its subscriberSlots, as above.
	shardChannels                 []string
	shardPubAt, shardRecvAt       []map[int64]bool // guarded by subMu
	shardReceived, shardPublished atomic.Int64
	healthyTrue, healthyFalse     atomic.Int64
	healthyWorst                  atomic.Int64 // ns
	subErrs                       atomic.Int64
}

func newChaosWorld(t *testing.T, c, acl, side *Client, cl *redistest.Cluster, shardOf []int) *chaosWorld {
	nodeOf := map[string]int{}
	for i := range cl.Masters {
		nodeOf[cl.Masters[i].Addr] = i
		nodeOf[cl.Replicas[i].Addr] = i
	}
	w := &chaosWorld{
		c: c, acl: acl, side: side, nodeOf: nodeOf, homes: map[int][]int{},
		acked: map[string]int64{}, items: map[uint32]itemRec{},
		counts: map[string]int{}, okBy: map[string]int{}, replies: map[string]int{},
		pubAt: map[int64]bool{}, recvAt: map[int64]bool{},
	}
	w.shardOf.Store(&shardOf)
	var err error
	w.auto, err = c.AutoPipeline()
	require.NoError(t, err)
	w.aclAuto, err = acl.AutoPipeline()
	require.NoError(t, err)
	for i := range cl.Masters {
		for n := 0; ; n++ {
			if ch := "chaos:schannel:" + strconv.Itoa(n); w.shard(ch) == i {
				w.shardChannels = append(w.shardChannels, ch)
				break
			}
		}
		w.shardPubAt = append(w.shardPubAt, map[int64]bool{})
		w.shardRecvAt = append(w.shardRecvAt, map[int64]bool{})
	}
	return w
}

func (w *chaosWorld) shard(key string) int { return w.slotShard(redistest.Slot(key)) }

func (w *chaosWorld) slotShard(slot int) int { return (*w.shardOf.Load())[slot] }

// moveSlot records that slot now lives on shard to.
func (w *chaosWorld) moveSlot(slot, to int) {
	cur := *w.shardOf.Load()
	w.homesMu.Lock()
	w.homes[slot] = append(w.homes[slot], cur[slot])
	w.homesMu.Unlock()
	next := slices.Clone(cur)
	next[slot] = to
	w.shardOf.Store(&next)
}

// keyLossy reports whether a data-losing fault (lossy, by shard) touched a
// shard key lives on or lived on before a resharding step moved its slot.
func (w *chaosWorld) keyLossy(key string, lossy map[int]bool) bool {
	slot := redistest.Slot(key)
	if lossy[w.slotShard(slot)] {
		return true
	}
	w.homesMu.Lock()
	defer w.homesMu.Unlock()
	return slices.ContainsFunc(w.homes[slot], func(s int) bool { return lossy[s] })
}

func (w *chaosWorld) ack(key string, v int64) {
	w.ackMu.Lock()
	if v > w.acked[key] {
		w.acked[key] = v
	}
	w.ackMu.Unlock()
}

// start launches the 100 goroutines: 60 cluster kv workers (GET/SET,
// pipelines, transactions, PUBLISH), 8 once-only writers (4 autopipelined,
// 4 scripted), 10 RPUSH/BLPOP pairs, 10 workers on the proxied standalone
// server, a subscriber, and Healthy every 200ms. A quarter of the kv
// workers, half of the once-only writers and of the pairs, and every worker
// on the proxied server run as chaosACLUser.
func (w *chaosWorld) start(stop <-chan struct{}, wg *sync.WaitGroup) {
	const kv, onceAuto, onceScripted, pairs, side = 60, 4, 4, 10, 10
	spawn := func(id int, fn func(id int, rng *rand.Rand, stop <-chan struct{})) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.recoverPanic(id)
			fn(id, rand.New(rand.NewPCG(uint64(id), 7)), stop)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.stalls.run(stop)
	}()
	id := 0
	for range kv {
		spawn(id, w.kvWorker)
		id++
	}
	var writers []int
	for i := range onceAuto + onceScripted {
		if i < onceAuto {
			spawn(id, w.onceAutoWriter)
		} else {
			spawn(id, w.onceScriptWriter)
		}
		writers = append(writers, id)
		id++
	}
	w.onceSlots = onceSlots(writers)
	for range pairs {
		spawn(id, w.pusher)
		id++
		spawn(id, w.popper)
		id++
	}
	for range side {
		spawn(id, w.sideWorker)
		id++
	}
	spawn(id, w.subscriber)
	id++
	spawn(id, w.shardSubscriber)
	id++
	spawn(id, w.healthChecker)
}

// recoverPanic counts and samples a panic of worker id's goroutine.
func (w *chaosWorld) recoverPanic(id int) {
	if r := recover(); r != nil {
		w.panics.Add(1)
		w.mu.Lock()
		w.sample("panic in worker %d: %v", id, r)
		w.mu.Unlock()
	}
}

// loop calls op until stop, pausing a little between calls so that 100
// goroutines on 2 CPUs under -race measure the client, not the scheduler.
func loop(rng *rand.Rand, stop <-chan struct{}, op func()) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		op()
		time.Sleep(time.Duration(2+rng.IntN(8)) * time.Millisecond)
	}
}

func opCtx() (context.Context, context.CancelFunc, time.Time, time.Time) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), chaosOpTime)
	dl, _ := ctx.Deadline()
	return ctx, cancel, t0, dl
}

// client returns the cluster client worker id runs on: every few, the ACL
// user's.
func (w *chaosWorld) client(id, every int) *Client {
	if id%every == 0 {
		return w.acl
	}
	return w.c
}

func (w *chaosWorld) kvWorker(id int, rng *rand.Rand, stop <-chan struct{}) {
	c := w.client(id, 4)
	keys := make([]string, chaosKeys)
	for i := range keys {
		keys[i] = "chaos:kv:" + strconv.Itoa(id) + ":" + strconv.Itoa(i)
	}
	txKey := "{chaos:tx:" + strconv.Itoa(id) + "}"
	var next int64
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		switch p := rng.IntN(100); {
		case p < 35:
			k := keys[rng.IntN(len(keys))]
			next++
			err := c.Set(ctx, k, next, 0).Err()
			if err == nil {
				w.ack(k, next)
			}
			w.record("kv", w.shard(k), t0, dl, err)
		case p < 60:
			k := keys[rng.IntN(len(keys))]
			w.record("kv", w.shard(k), t0, dl, c.Get(ctx, k).Err())
		case p < 80:
			batch := make([]string, 4)
			vals := make([]int64, len(batch))
			cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i := range batch {
					batch[i] = keys[rng.IntN(len(keys))]
					next++
					vals[i] = next
					p.Set(ctx, batch[i], next, 0)
				}
				return nil
			})
			for i, cmd := range cmds {
				if cmd.Err() == nil {
					w.ack(batch[i], vals[i])
				}
				w.record("pipeline", w.shard(batch[i]), t0, dl, cmd.Err())
			}
		case p < 95:
			var incr *redis.IntCmd
			_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
				incr = p.Incr(ctx, txKey+":n")
				p.Set(ctx, txKey+":at", t0.UnixNano(), 0)
				return nil
			})
			if err == nil {
				w.ack(txKey+":n", incr.Val())
			}
			w.record("tx", w.shard(txKey), t0, dl, err)
		case p < 98:
			err := c.Publish(ctx, chaosChannel, id).Err()
			if err == nil {
				w.published.Add(1)
				w.noteMessage(w.pubAt, t0)
			}
			w.record("publish", w.shard(chaosChannel), t0, dl, err)
		default:
			i := rng.IntN(len(w.shardChannels))
			err := c.SPublish(ctx, w.shardChannels[i], id).Err()
			if err == nil {
				w.shardPublished.Add(1)
				w.noteMessage(w.shardPubAt[i], t0)
			}
			w.record("spublish", i, t0, dl, err)
		}
	})
}

func queueKey(i int) string { return "chaos:queue:" + strconv.Itoa(i) }

// rareQueue is fed by one push in twenty: pops on it mostly wait, so that
// their contexts end while they do.
var rareQueue = queueKey(chaosQueues)

func (w *chaosWorld) pusher(id int, rng *rand.Rand, stop <-chan struct{}) {
	c := w.client(id/2, 2) // ids alternate between pushers and poppers
	n := 0
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		q := queueKey(rng.IntN(chaosQueues))
		if rng.IntN(20) == 0 {
			q = rareQueue
		}
		n++
		item := strconv.Itoa(id) + ":" + strconv.Itoa(n)
		err := c.RPush(ctx, q, item).Err()
		w.popMu.Lock()
		rec := w.items[itemID(id, n)]
		// A fault on the queue's node (CLIENT KILL, a pause) may drop the
		// connection after the server ran the RPUSH and before the reply
		// came: RPUSH is not retried then (ErrOutcomeUnknown), so the item
		// is in the queue once or not at all, and a pop of it is a stray.
		rec.pushAt, rec.acked = t0.UnixMilli(), err == nil
		w.items[itemID(id, n)] = rec
		w.popMu.Unlock()
		w.record("push", w.shard(q), t0, dl, err)
	})
}

// popper pops as a consumer would, in every way a blocking call can be
// sent: BLPop, BLPOP through Do, two pops in one pipeline, and pops whose
// context ends while they wait, by its deadline or by cancel() alone with
// no deadline (BLPOP 0). Half of them run as chaosACLUser, whose cancelled
// calls CLIENT UNBLOCK cannot end.
func (w *chaosWorld) popper(id int, rng *rand.Rand, stop <-chan struct{}) {
	c, prefix := w.c, ""
	if w.client(id/2, 2) == w.acl { // ids alternate between pushers and poppers
		c, prefix = w.acl, "acl-"
	}
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		q := queueKey(rng.IntN(chaosQueues))
		shard := w.shard(q)
		popped := func(res []string, err error) {
			if err == nil && len(res) == 2 {
				w.pop(res[1], w.faults.active(shard, t0, time.Now(), lossyKinds...))
			}
		}
		switch rng.IntN(5) {
		case 0:
			res, err := c.BLPop(ctx, time.Second, q).Result()
			popped(res, err)
			w.record(prefix+"pop", shard, t0, dl, err)
		case 1:
			res, err := c.Do(ctx, "blpop", q, 1).StringSlice()
			popped(res, err)
			w.record(prefix+"pop-do", shard, t0, dl, err)
		case 2:
			cmds, _ := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.BLPop(ctx, 500*time.Millisecond, q)
				p.Do(ctx, "blpop", q, "0.5")
				return nil
			})
			for _, cmd := range cmds {
				var res []string
				var err error
				switch cmd := cmd.(type) {
				case *redis.StringSliceCmd:
					res, err = cmd.Result()
				case *redis.Cmd:
					res, err = cmd.StringSlice()
				}
				popped(res, err)
				w.record(prefix+"pop-pipeline", shard, t0, dl, err)
			}
		case 3:
			if rng.IntN(2) == 0 {
				q, shard = rareQueue, w.shard(rareQueue)
			}
			short, cancelShort := context.WithTimeout(ctx, time.Duration(200+rng.IntN(500))*time.Millisecond)
			dl, _ = short.Deadline()
			res, err := c.BLPop(short, 2*time.Second, q).Result()
			cancelShort()
			popped(res, err)
			w.record(prefix+"pop-cancel", shard, t0, dl, err)
		default:
			if rng.IntN(2) == 0 {
				q, shard = rareQueue, w.shard(rareQueue)
			}
			cctx, cancelNow := context.WithCancel(ctx)
			after := time.Duration(200+rng.IntN(500)) * time.Millisecond
			timer := time.AfterFunc(after, cancelNow)
			res, err := c.BLPop(cctx, 0, q).Result()
			timer.Stop()
			cancelNow()
			popped(res, err)
			w.record(prefix+"pop-cancel", shard, t0, t0.Add(after), err)
		}
	})
}

// itemRec is what the soak knows of one queue item; kept small, so that the
// bookkeeping of a long soak does not drown the heap check.
type itemRec struct {
	pushAt int64    // unix ms of the push attempt
	popAt  [2]int64 // unix ms of the first two pops
	pops   uint8
	acked  bool // the RPUSH was acknowledged
	lossy  bool // popped while a lossy fault hit the queue's shard
}

// itemID packs a pusher's id and its push count; items are "id:n".
func itemID(id, n int) uint32 { return uint32(id)<<20 | uint32(n)&(1<<20-1) }

func parseItem(s string) (uint32, bool) {
	a, b, ok := strings.Cut(s, ":")
	id, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	return itemID(id, n), ok && err1 == nil && err2 == nil
}

func fmtMilli(ms int64) string { return time.UnixMilli(ms).Format("15:04:05.000") }

func (w *chaosWorld) pop(item string, lossy bool) {
	id, ok := parseItem(item)
	if !ok {
		w.mu.Lock()
		w.sample("popped %q, which no pusher made", item)
		w.untyped++
		w.mu.Unlock()
		return
	}
	w.popMu.Lock()
	defer w.popMu.Unlock()
	rec := w.items[id]
	if int(rec.pops) < len(rec.popAt) {
		rec.popAt[rec.pops] = time.Now().UnixMilli()
	}
	rec.pops++
	rec.lossy = rec.lossy || lossy
	w.items[id] = rec
}

// sideWorker runs on the proxied standalone server, as chaosACLUser:
// SET, GET, and now and then a short BLPOP on an empty list, through Do or
// in a pipeline, whose context may end first.
func (w *chaosWorld) sideWorker(id int, rng *rand.Rand, stop <-chan struct{}) {
	k := "chaos:side:" + strconv.Itoa(id)
	q := "chaos:side:queue:" + strconv.Itoa(id)
	var next int64
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		var err error
		switch p := rng.IntN(10); {
		case p < 4:
			next++
			if err = w.side.Set(ctx, k, next, 0).Err(); err == nil {
				w.ack("side|"+k, next)
			}
		case p < 8:
			err = w.side.Get(ctx, k).Err()
		case p < 9:
			_, err = w.side.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Get(ctx, k)
				p.Do(ctx, "blpop", q, "0.2")
				return nil
			})
			if err == redis.Nil {
				err = nil
			}
			w.record("side-pop", sideShard, t0, dl, err)
			return
		default:
			short, cancelShort := context.WithTimeout(ctx, time.Duration(100+rng.IntN(200))*time.Millisecond)
			dl, _ = short.Deadline()
			err = w.side.Do(short, "blpop", q, 1).Err()
			cancelShort()
			w.record("side-pop", sideShard, t0, dl, err)
			return
		}
		w.record("side", sideShard, t0, dl, err)
	})
}

// subscriber receives on chaosChannel on one PubSub for the whole run;
// go-redis reconnects it after an error.
func (w *chaosWorld) subscriber(_ int, rng *rand.Rand, stop <-chan struct{}) {
	sub := w.c.Subscribe(context.Background(), chaosChannel)
	defer sub.Close()
	w.receive("subscribe", sub, rng, stop, func(*redis.Message) {
		w.received.Add(1)
		w.noteMessage(w.recvAt, time.Now())
	})
}

// shardSubscriber receives on every shard channel, one per shard, on one
// PubSub of the ACL user for the whole run: each channel on its own node's
// connection, the ACL user's handshake replayed on each.
func (w *chaosWorld) shardSubscriber(_ int, rng *rand.Rand, stop <-chan struct{}) {
	sub := w.acl.SSubscribe(context.Background(), w.shardChannels...)
	defer sub.Close()
	w.receive("ssubscribe", sub, rng, stop, func(m *redis.Message) {
		if i := slices.Index(w.shardChannels, m.Channel); i >= 0 {
			w.shardReceived.Add(1)
			w.noteMessage(w.shardRecvAt[i], time.Now())
		}
	})
}

// receive reads sub until stop, handing each message to got and recording
// each read as op. An idle ReceiveTimeout is no error.
func (w *chaosWorld) receive(op string, sub *redis.PubSub, rng *rand.Rand, stop <-chan struct{}, got func(*redis.Message)) {
	loop(rng, stop, func() {
		ctx, cancel, t0, dl := opCtx()
		defer cancel()
		msg, err := sub.ReceiveTimeout(ctx, 500*time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && !w.faults.active(anyClusterShard, t0, time.Now()) {
			err = nil // nothing published for 500ms
		}
		if m, ok := msg.(*redis.Message); ok {
			got(m)
		}
		if err != nil {
			w.subErrs.Add(1)
		}
		w.record(op, anyClusterShard, t0, dl, err)
	})
}

func (w *chaosWorld) healthChecker(_ int, _ *rand.Rand, stop <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel, t0, dl := opCtx()
		ok := w.c.Healthy(ctx, "redisguard:health:chaos")
		cancel()
		if ok {
			w.healthyTrue.Add(1)
		} else {
			w.healthyFalse.Add(1)
		}
		took := time.Since(t0)
		if took > time.Duration(w.healthyWorst.Load()) {
			w.healthyWorst.Store(int64(took))
		}
		w.record("healthy", -1, t0, dl, nil)
	}
}

// readBack reads every acknowledged key through a fresh go-redis client and
// returns those that lost their last acknowledged value on a shard that no
// data-losing fault touched (lossy[shard]); losses elsewhere are reported,
// not failed.
func (w *chaosWorld) readBack(t *testing.T, lossy map[int]bool) []string {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	var lost []string
	for key, want := range w.acked {
		var got int64
		var err error
		if k, ok := strings.CutPrefix(key, "side|"); ok {
			got, err = w.side.Get(ctx, k).Int64()
		} else {
			got, err = w.c.Get(ctx, key).Int64()
		}
		if err != nil && err != redis.Nil {
			t.Errorf("read-back of %s: %v", key, err)
			continue
		}
		if got >= want {
			continue
		}
		shard, faulted := sideShard, lossy[sideShard]
		if !strings.HasPrefix(key, "side|") {
			shard, faulted = w.shard(key), w.keyLossy(key, lossy)
		}
		msg := fmt.Sprintf("%s (shard %d): acknowledged %d, read %d", key, shard, want, got)
		if faulted {
			w.mu.Lock()
			w.counts["lost-on-faulted-shard"]++
			w.mu.Unlock()
			continue
		}
		lost = append(lost, msg)
	}
	return lost
}

// drainQueues pops what is left, so that items pushed but never popped count
// as neither lost nor duplicated, and returns how many were left.
func (w *chaosWorld) drainQueues(t *testing.T) int {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	left := 0
	for i := range chaosQueues + 1 { // rareQueue included
		items, err := w.c.LRange(ctx, queueKey(i), 0, -1).Result()
		require.NoError(t, err)
		for _, it := range items {
			w.pop(it, false)
		}
		left += len(items)
	}
	return left
}
