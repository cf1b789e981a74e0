package redisguard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redisguard/redisguard/internal/background"
	"github.com/redisguard/redisguard/internal/resp"
)

// splitConn is a sharded subscription's connection as go-redis sees it:
// one net.Conn over one connection (a leg) per node that owns one of its
// shard channels' slots. go-redis's PubSub has exactly one connection, and
// Redis delivers a shard channel only on its slot's owner, so this is what
// lets one PubSub hold shard channels that live on several nodes.
//
//   - Writes are split by command: SSUBSCRIBE's channels go to the leg of
//     the node the last slot map names for their slot (a leg is dialed on
//     first use), SUNSUBSCRIBE's to the leg subscribed to them, and the
//     health check's bare PING to every leg; anything else goes to the first
//     leg, the one go-redis dialed. Each command is read once, here: a leg
//     is sent its share one command per slot, and its set is told (send,
//     not subscriptionConn.Write, which would read it again).
//   - Reads merge the legs' replies, whole replies at a time, in the order
//     they arrive. Each leg is read by a goroutine of its own, stopped by
//     Close. The replies go-redis did not ask for are dropped: a new leg's
//     handshake (what go-redis wrote before its first subscribe, replayed
//     there) and the other legs' answers to a forwarded PING.
//   - A channel follows its slot: a node that gives the slot up (an
//     unsolicited SUNSUBSCRIBE) or answers MOVED has the channel subscribed
//     again at the owner (inspect).
//   - Serve what can be served: a channel whose owner cannot be reached (its
//     breaker is open, the dial fails) waits, and is tried again every
//     100ms against a refreshed slot map, while the other channels go on
//     (retry). A leg other than the first that fails is closed and its
//     channels wait the same way. Each channel's move is told when its new
//     node confirms it.
//   - The first leg carries go-redis's own exchanges, so its failure fails
//     the whole connection: go-redis dials again and subscribes again to
//     everything. The other legs count as moved too (they were resubscribed,
//     so they may have missed messages).
//
// Every leg is a subscriptionConn, tracked under its own node, so a node
// that stops answering breaks exactly the legs on it. The first leg holds
// the subscription's one long permit.
type splitConn struct {
	s      *subscriptions
	dial   func(ctx context.Context, addr string) (*subscriptionConn, error) // dials a leg without a permit
	home   *leg
	frames chan []byte      // whole replies, from the legs' readers; nil for a leg's failure
	failed chan struct{}    // closed at the first leg failure; err says what
	bg     background.Group // the legs' readers and the retry and leg-watch loops; cancelled, then closed, by Close
	done   <-chan struct{}  // bg's context's Done: closed by Close

	err           error // set before failed is closed
	failOnce      sync.Once
	closeOnce     sync.Once
	readBy        atomic.Int64 // read deadline, unix ns; 0 for none
	cur           []byte       // the rest of the reply being read; only Read uses it
	mu            sync.Mutex
	legs          []*leg                 // guarded by mu; home first
	handshake     []byte                 // guarded by mu; what go-redis wrote before its first subscribe
	handshakeCmds int                    // guarded by mu; the commands in handshake
	subscribed    bool                   // guarded by mu
	writeBy       time.Time              // guarded by mu; the write deadline
	lost          map[string]pendingMove // guarded by mu; shard channels a node gave up, by name, until subscribed again
	waiting       map[string]struct{}    // guarded by mu; shard channels whose owner could not be reached
	retrying      bool                   // guarded by mu; retry is running
	watching      bool                   // guarded by mu; watchLegs is running
	partial       []byte                 // guarded by mu; the start of a command go-redis has not finished writing
}

// leg is one node's connection of a splitConn.
type leg struct {
	*subscriptionConn
	skip  atomic.Int32   // handshake replies still to drop
	pongs atomic.Int32   // PONGs to forwarded PINGs still to drop
	asked map[string]int // guarded by mu; SUNSUBSCRIBE replies go-redis asked for, by channel
}

func newSplitConn(s *subscriptions, home *subscriptionConn, dial func(context.Context, string) (*subscriptionConn, error)) *splitConn {
	c := &splitConn{s: s, dial: dial, home: &leg{subscriptionConn: home},
		frames: make(chan []byte, 64), failed: make(chan struct{})}
	c.done = c.bg.Context().Done()
	c.legs = []*leg{c.home}
	c.bg.Go(func(context.Context) { c.read(c.home) })
	return c
}

func (c *splitConn) Read(p []byte) (int, error) {
	if len(c.cur) == 0 {
		f, err := c.next()
		if err != nil {
			return 0, err
		}
		c.cur = f
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// next returns the next reply any leg read, waiting at most until the read
// deadline. A failed leg's replies come before its failure, which is
// returned then, in order with the other legs' replies, and from then on.
func (c *splitConn) next() ([]byte, error) {
	select {
	case <-c.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case f := <-c.frames:
		return c.reply(f)
	default:
	}
	select {
	case <-c.failed:
		return nil, c.err
	default:
	}
	var expired <-chan time.Time
	if by := c.readBy.Load(); by != 0 {
		// go-redis sets deadlines by the wall clock, as for a socket.
		wait := time.Until(time.Unix(0, by))
		if wait <= 0 {
			return nil, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	select {
	case f := <-c.frames:
		return c.reply(f)
	case <-expired:
		return nil, os.ErrDeadlineExceeded
	case <-c.done:
		return nil, net.ErrClosed
	}
}

// reply turns what a leg's reader sent into Read's answer: nil is the
// leg's failure.
func (c *splitConn) reply(f []byte) ([]byte, error) {
	if f == nil {
		return nil, c.err
	}
	return f, nil
}

// read runs for each leg until the leg fails or the splitConn is closed,
// handing whole replies to Read.
func (c *splitConn) read(l *leg) {
	r := resp.NewReader(l, 16<<10)
	for {
		f, err := r.Next()
		if errors.Is(err, resp.ErrMalformed) {
			err = fmt.Errorf("redisguard: unexpected reply from Redis on a shard subscription: %w", err)
		}
		if err != nil {
			c.legFailed(l, err)
			return
		}
		if l.drop(f) {
			continue
		}
		forward, err := c.inspect(l, f)
		if err != nil {
			c.legFailed(l, err)
			return
		}
		if !forward {
			continue
		}
		select {
		case c.frames <- f:
		case <-c.done:
			return
		}
	}
}

// legFailed is told that l failed: the first leg fails the connection,
// another is retired.
func (c *splitConn) legFailed(l *leg, err error) {
	if l == c.home {
		c.fail(err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retire(l, err)
}

// retire closes a leg other than the first that failed, and has its shard
// channels wait for their owner (see retry): the other legs go on. Each
// channel's move is told when a node confirms it. c.mu is held.
func (c *splitConn) retire(l *leg, err error) {
	i := slices.Index(c.legs, l)
	if i < 0 {
		return
	}
	select {
	case <-c.done:
		return // Close closes it
	default:
	}
	c.legs = slices.Delete(c.legs, i, i+1)
	l.mu.Lock()
	chans := slices.Sorted(maps.Keys(l.subs[shardKind]))
	l.mu.Unlock()
	// Its channels' moves are told one by one (lose), not as the
	// connection's.
	l.closing.Store(true)
	l.broken.Store(false)
	_ = l.Close()
	c.lose(l, chans)
	for _, ch := range chans {
		c.wait(ch, err)
	}
}

// fail records the first failure, of the first leg or of retry, and hands
// Read a nil reply, after the replies already handed to it.
func (c *splitConn) fail(err error) {
	select {
	case <-c.done:
		return // closing: the legs' errors are Close's own
	default:
	}
	c.failOnce.Do(func() {
		c.err = err
		close(c.failed)
	})
	select {
	case c.frames <- nil:
	case <-c.done:
	}
}

// inspect looks at a reply l read and reports whether it goes on to
// go-redis. Three say where a shard channel is served:
//
//   - an SSUBSCRIBE confirmation completes the channel's move, if it was
//     moving: go-redis subscribed again after a connection broke (claim),
//     or one of the two below;
//   - an SUNSUBSCRIBE that go-redis did not ask for says the node gave the
//     channel's slot up (it migrated, or the node became a replica): the
//     channel is subscribed again at its owner, after a slot map refresh;
//   - a MOVED says the node does not serve the slot of the channels just
//     subscribed there (the slot map was stale): they are subscribed again
//     at the node it names.
//
// The last two are not passed on: go-redis still holds the channels, and the
// move is told (EventSubscriptionMoved) when the new node confirms them.
func (c *splitConn) inspect(l *leg, f []byte) (bool, error) {
	if addr, slot, ok := parseMoved(f); ok {
		chans := l.takeSlot(slot)
		if len(chans) == 0 {
			return true, nil
		}
		return false, c.reroute(l, chans, addr)
	}
	kind, ch, ok := pubsubReply(f)
	if !ok {
		return true, nil
	}
	switch kind {
	case "ssubscribe":
		c.mu.Lock()
		p, moved := c.lost[ch]
		delete(c.lost, ch)
		c.mu.Unlock()
		if moved {
			c.s.arrived(&p, l.addr)
		}
	case "sunsubscribe":
		asked := l.wasAsked(ch)
		if !asked {
			l.mu.Lock()
			delete(l.subs[shardKind], ch)
			l.mu.Unlock()
		}
		if !asked && ch != "" {
			if c.s.topo != nil {
				c.s.topo.force()
			}
			return false, c.reroute(l, []string{ch}, "")
		}
	}
	return true, nil
}

// reroute subscribes chans, which from no longer serves, at addr, or at
// their owner in the last slot map if addr is "". A channel whose node
// cannot be reached waits (see retry).
func (c *splitConn) reroute(from *leg, chans []string, addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lose(from, chans)
	byLeg := map[*leg][]string{}
	var order []*leg
	for _, ch := range chans {
		to := addr
		if to == "" {
			to = c.s.ownerOf(channelSlot(ch))
		}
		l, err := c.legFor(to)
		if err != nil {
			if !errors.Is(err, ErrNodeUnavailable) && !isNetworkError(err) {
				return err
			}
			c.wait(ch, err)
			continue
		}
		if _, ok := byLeg[l]; !ok {
			order = append(order, l)
		}
		byLeg[l] = append(byLeg[l], ch)
	}
	for _, l := range order {
		if err := c.subscribe(l, byLeg[l]); err != nil {
			return err
		}
	}
	c.s.k.log.Debug("redisguard: shard channels subscribed again at their slot's owner",
		"from", from.addr, "channels", len(chans))
	return nil
}

// lose records that from no longer serves chans: each one's move is told
// when a node confirms it (inspect). c.mu is held.
func (c *splitConn) lose(from *leg, chans []string) {
	if c.lost == nil {
		c.lost = make(map[string]pendingMove)
	}
	for _, ch := range chans {
		if _, ok := c.lost[ch]; !ok {
			c.lost[ch] = pendingMove{names: shardKind + " " + ch, from: from.addr,
				lastRead: time.Unix(0, from.lastRead.Load())}
		}
	}
}

// takeSlot removes the shard channels of slot from l's set and returns
// them.
func (l *leg) takeSlot(slot int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for ch := range l.subs[shardKind] {
		if channelSlot(ch) == slot {
			out = append(out, ch)
			delete(l.subs[shardKind], ch)
		}
	}
	slices.Sort(out)
	return out
}

// parseMoved reads a "-MOVED <slot> <addr>" error reply.
func parseMoved(f []byte) (addr string, slot int, ok bool) {
	typ, text, ok := resp.Simple(f)
	if !ok || typ != resp.SimpleError {
		return "", 0, false
	}
	kind, slot, addr, ok := parseRedirect(string(text))
	return addr, slot, ok && kind == "MOVED"
}

// pubsubReply reads an SSUBSCRIBE or SUNSUBSCRIBE confirmation: an array
// (RESP2) or push (RESP3) whose first element is the kind, and second the
// shard channel ("" for an SUNSUBSCRIBE with nothing left).
func pubsubReply(f []byte) (kind, channel string, ok bool) {
	var head [2][]byte
	if _, k, ok := resp.Elems(f, head[:]); !ok || k < 2 {
		return "", "", false
	}
	switch kind, add := subscribeKind(head[0]); {
	case kind != shardKind:
		return "", "", false
	case add:
		return "ssubscribe", string(head[1]), true
	default:
		return "sunsubscribe", string(head[1]), true
	}
}

// drop reports whether f, read on l, is a reply go-redis did not ask for.
// A handshake reply is dropped even if it is an error, as go-redis ignores
// some (CLIENT SETINFO on an older server); a refused AUTH shows in the
// replies to the subscribe commands that follow it.
func (l *leg) drop(f []byte) bool {
	if l.skip.Load() > 0 {
		l.skip.Add(-1)
		return true
	}
	if l.pongs.Load() > 0 && isPong(f) {
		l.pongs.Add(-1)
		return true
	}
	return false
}

// isPong reports whether f answers a PING on a subscribed connection:
// ["pong", ""] in RESP2, +PONG in RESP3.
func isPong(f []byte) bool {
	if typ, text, ok := resp.Simple(f); ok {
		return typ == resp.SimpleString && string(text) == "PONG"
	}
	var head [1][]byte
	n, k, ok := resp.Elems(f, head[:])
	return ok && n == 2 && k == 1 && string(head[0]) == "pong"
}

func (c *splitConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// go-redis's buffered writer may cut a long command (a resubscription
	// to many channels) over several writes: only whole ones are split.
	data := p
	if len(c.partial) > 0 {
		data = append(c.partial, p...)
		c.partial = nil
	}
	type out struct {
		l *leg
		b []byte
	}
	var outs []out
	to := func(l *leg, cmd []byte) {
		if i := slices.IndexFunc(outs, func(o out) bool { return o.l == l }); i >= 0 {
			outs[i].b = append(outs[i].b, cmd...)
			return
		}
		outs = append(outs, out{l, append([]byte(nil), cmd...)})
	}
	var buf [8][]byte
	args := buf[:0]
	for rest := data; len(rest) > 0; {
		var n int
		var err error
		if args, n, err = resp.Command(rest, args); err != nil {
			to(c.home, rest) // not a command: as it is, to the connection go-redis dialed
			break
		}
		if n == 0 {
			c.partial = append([]byte(nil), rest...)
			break
		}
		cmd := rest[:n]
		rest = rest[n:]
		kind, add := "", false
		if len(args) > 0 {
			kind, add = subscribeKind(args[0])
		}
		if kind != "" {
			c.subscribed = true
		}
		switch {
		case !c.subscribed: // the handshake, replayed on every other leg
			c.handshake = append(c.handshake, cmd...)
			c.handshakeCmds++
			to(c.home, cmd)
		case kind == shardKind && len(args) > 1:
			groups, err := c.route(asStrings(args[1:]), add)
			if err != nil {
				return 0, err
			}
			for _, g := range groups {
				g.l.apply(kind, add, g.channels)
				to(g.l, appendBySlot(nil, string(args[0]), g.channels))
			}
		case kind == shardKind: // SUNSUBSCRIBE from everything
			clear(c.waiting)
			clear(c.lost)
			for _, l := range c.legs {
				l.expect(nil)
				l.apply(kind, add, nil)
				to(l, cmd)
			}
		case bytes.Equal(cmd, pingCmd):
			for _, l := range c.legs {
				if l != c.home {
					l.pongs.Add(1)
				}
				to(l, cmd)
			}
		default:
			if kind != "" {
				c.home.apply(kind, add, asStrings(args[1:]))
			}
			to(c.home, cmd)
		}
	}
	for _, o := range outs {
		if _, err := o.l.send(o.b); err != nil {
			if o.l == c.home {
				return 0, err
			}
			c.retire(o.l, err)
		}
	}
	return len(p), nil
}

// apply records a command of kind that l is sent (subscriptionSet.apply).
func (l *leg) apply(kind string, add bool, names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs.apply(kind, add, names)
}

// appendBySlot appends the command name of chans to b, one per slot
// (bySlot).
func appendBySlot(b []byte, name string, chans []string) []byte {
	for _, g := range bySlot(chans) {
		b = resp.AppendCommand(b, name, g...)
	}
	return b
}

// expect records the SUNSUBSCRIBE replies l will send for chans, nil for
// all of its shard channels (one reply each, or one with no channel if it
// has none), so that inspect tells them from those the node sends on its
// own.
func (l *leg) expect(chans []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.asked == nil {
		l.asked = make(map[string]int)
	}
	if chans == nil {
		chans = slices.Collect(maps.Keys(l.subs[shardKind]))
		if len(chans) == 0 {
			chans = []string{""}
		}
	}
	for _, ch := range chans {
		l.asked[ch]++
	}
}

// asked reports whether an SUNSUBSCRIBE reply for ch was expected, and
// counts it off.
func (l *leg) wasAsked(ch string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.asked[ch] == 0 {
		return false
	}
	if l.asked[ch]--; l.asked[ch] == 0 {
		delete(l.asked, ch)
	}
	return true
}

type legChannels struct {
	l        *leg
	channels []string
}

// route groups channels by the leg they go to, dialing the legs not yet
// there. A channel already subscribed on a leg stays on it; a new one goes
// to its slot's owner in the last slot map, or the first leg without one.
// A new channel whose owner cannot be reached waits (see retry): the
// others are served meanwhile. c.mu is held.
func (c *splitConn) route(channels []string, add bool) ([]legChannels, error) {
	var groups []legChannels
	for _, ch := range channels {
		delete(c.waiting, ch)
		l := c.subscribedOn(ch)
		if !add {
			delete(c.lost, ch)
		} else if l == nil {
			c.claim(ch)
			var err error
			if l, err = c.legFor(c.s.ownerOf(channelSlot(ch))); err != nil {
				if !errors.Is(err, ErrNodeUnavailable) && !isNetworkError(err) {
					return nil, err
				}
				c.wait(ch, err)
				continue
			}
		}
		if l == nil {
			l = c.home
		}
		if !add {
			l.expect([]string{ch})
		}
		if i := slices.IndexFunc(groups, func(g legChannels) bool { return g.l == l }); i >= 0 {
			groups[i].channels = append(groups[i].channels, ch)
		} else {
			groups = append(groups, legChannels{l, []string{ch}})
		}
	}
	return groups, nil
}

// claim takes over the move of ch, if a connection that broke was
// subscribed to it: the node that confirms ch tells it (inspect). c.mu is
// held.
func (c *splitConn) claim(ch string) {
	if _, ok := c.lost[ch]; ok {
		return
	}
	if p, ok := c.s.claim(shardKey(ch)); ok {
		if c.lost == nil {
			c.lost = make(map[string]pendingMove)
		}
		c.lost[ch] = *p
	}
}

// wait keeps ch, whose owner could not be reached, for retry, and starts
// it. c.mu is held.
func (c *splitConn) wait(ch string, err error) {
	if c.waiting == nil {
		c.waiting = make(map[string]struct{})
	}
	c.waiting[ch] = struct{}{}
	c.s.k.log.Debug("redisguard: a shard channel waits for its slot's owner", "channel", ch, "error", err)
	if !c.retrying {
		c.retrying = c.bg.Go(func(context.Context) { c.every(retryEvery, c.retry) })
	}
}

// retryEvery is how often channels waiting for an owner are tried again.
const retryEvery = 100 * time.Millisecond

// retry subscribes the waiting channels at their owners, asking for a slot
// map refresh first, and reports whether any still waits. The connection
// fails if a leg cannot be written.
func (c *splitConn) retry() bool {
	if c.s.topo != nil {
		c.s.topo.trigger()
	}
	if err := c.retryOnce(); err != nil {
		c.fail(err)
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiting) == 0 {
		c.retrying = false
		return false
	}
	return true
}

// every runs step every d, on the wall clock as a socket's deadlines do,
// until Close or until step returns false. It runs in bg.
func (c *splitConn) every(d time.Duration, step func() bool) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
		if !step() {
			return
		}
	}
}

func (c *splitConn) retryOnce() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	chans := slices.Sorted(maps.Keys(c.waiting))
	clear(c.waiting)
	groups, err := c.route(chans, true)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if err := c.subscribe(g.l, g.channels); err != nil {
			return err
		}
	}
	return nil
}

// subscribedOn returns the leg subscribed to shard channel ch, if any.
func (c *splitConn) subscribedOn(ch string) *leg {
	for _, l := range c.legs {
		l.mu.Lock()
		_, ok := l.subs[shardKind][ch]
		l.mu.Unlock()
		if ok {
			return l
		}
	}
	return nil
}

// legFor returns the leg to addr, dialing it if there is none; "" is the
// first leg. A new leg is sent the handshake first, and its replies
// dropped. c.mu is held.
func (c *splitConn) legFor(addr string) (*leg, error) {
	if addr == "" {
		return c.home, nil
	}
	for _, l := range c.legs {
		if l.addr == addr {
			return l, nil
		}
	}
	select {
	case <-c.done:
		return nil, net.ErrClosed
	case <-c.failed:
		return nil, c.err
	default:
	}
	ctx, cancel := context.WithDeadline(c.bg.Context(), c.ownDeadline(c.s.k.cfg.DialTimeout)) // Close cuts a dial short
	defer cancel()
	conn, err := c.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	l := &leg{subscriptionConn: conn}
	_ = l.SetWriteDeadline(c.ownDeadline(c.s.k.cfg.WriteTimeout))
	l.skip.Store(int32(c.handshakeCmds))
	if len(c.handshake) > 0 {
		if _, err := l.send(c.handshake); err != nil {
			_ = l.Close()
			return nil, err
		}
	}
	c.legs = append(c.legs, l)
	c.bg.Go(func(context.Context) { c.read(l) }) // refused only once Close has begun, which closes l
	if !c.watching {
		c.watching = c.bg.Go(func(context.Context) { c.every(legCheckEvery, c.watchLegs) })
	}
	return l, nil
}

// How often a connection of several legs looks for a quiet one, and how
// long a leg may read nothing before it is pinged. A leg is found hung
// ReadTimeout after its first unanswered PING (subscriptionConn.asking),
// so within about ReadTimeout plus 2s of its node's last answer.
const (
	legCheckEvery = time.Second
	legQuietAfter = time.Second
)

// watchLegs, run every legCheckEvery until Close once the connection has a
// second leg, pings every leg that has read nothing for legQuietAfter.
// go-redis's health check pings only while the whole PubSub is quiet, which
// one busy leg prevents, and a hung node's leg reads nothing but accepts
// what is written: a PING that finds the previous one unanswered breaks the
// leg off (subscriptionConn.unanswered), and its channels move (retire, or,
// for the first leg, go-redis's redial). The PONGs are dropped.
func (c *splitConn) watchLegs() bool {
	c.pingQuietLegs()
	return true
}

func (c *splitConn) pingQuietLegs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.s.k.clock.Now().UnixNano()
	for _, l := range slices.Clone(c.legs) {
		if now-l.lastRead.Load() < int64(legQuietAfter) {
			continue
		}
		l.pongs.Add(1)
		_ = l.SetWriteDeadline(c.ownDeadline(c.s.k.cfg.WriteTimeout))
		if _, err := l.send(pingCmd); err != nil && l != c.home {
			c.retire(l, err) // the first leg's reader fails the connection
		}
	}
}

// ownDeadline is the deadline for a write or dial: go-redis's while it is
// writing (Write), or d from now for what splitConn sends on its own
// (reroute, retry). c.mu is held.
func (c *splitConn) ownDeadline(d time.Duration) time.Time {
	if now := time.Now(); c.writeBy.After(now) {
		return c.writeBy
	} else {
		return now.Add(d)
	}
}

// subscribe sends SSUBSCRIBE for chans on l, on splitConn's own account.
// A leg other than the first that fails is retired. c.mu is held.
func (c *splitConn) subscribe(l *leg, chans []string) error {
	_ = l.SetWriteDeadline(c.ownDeadline(c.s.k.cfg.WriteTimeout))
	l.apply(shardKind, true, chans)
	if _, err := l.send(appendBySlot(nil, "ssubscribe", chans)); err != nil {
		if l == c.home {
			return err
		}
		c.retire(l, err)
	}
	return nil
}

// ownerOf returns the master of slot in the last slot map; "" if there is
// none.
func (s *subscriptions) ownerOf(slot int) string {
	if s.topo == nil {
		return ""
	}
	return s.topo.slotMap().Owner(slot)
}

// Close closes every leg; the first leg gives the permit back. After a
// leg failed, the others count as broken too: go-redis subscribes again to
// their channels on new connections, and that move is told.
func (c *splitConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.bg.Cancel() // before the legs close, so that their readers take it for the end, not a failure
		c.mu.Lock()
		legs := slices.Clone(c.legs)
		c.mu.Unlock()
		broke := false
		select {
		case <-c.failed:
			broke = true
		default:
		}
		for _, l := range legs {
			if broke {
				l.broken.Store(true)
			}
			if cerr := l.Close(); l == c.home {
				err = cerr
			}
		}
		c.bg.Close()
	})
	return err
}

func (c *splitConn) LocalAddr() net.Addr  { return c.home.LocalAddr() }
func (c *splitConn) RemoteAddr() net.Addr { return c.home.RemoteAddr() }

func (c *splitConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// SetReadDeadline bounds Read; the legs themselves are read without one.
func (c *splitConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.readBy.Store(0)
	} else {
		c.readBy.Store(t.UnixNano())
	}
	return nil
}

func (c *splitConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeBy = t
	var err error
	for _, l := range c.legs {
		err = errors.Join(err, l.SetWriteDeadline(t))
	}
	return err
}
