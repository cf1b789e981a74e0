package redisguard

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// layer is one hook in a go-redis client's chain.
type layer uint8

const (
	// layerUser runs the user's hooks (Client.AddHook), every step.
	layerUser layer = iota
	// layerUserDials runs the user's dial hooks alone: their process and
	// pipeline hooks run once, where every command enters.
	layerUserDials
	// layerPending hands a command to the Cluster-mode Client once the
	// server's first answer said cluster (ModeAuto, detect_pending.go).
	layerPending
	// layerSentinel tracks the master's connections (sentinelMaster).
	layerSentinel
	// layerSentinelReads sends reads to the master's replicas
	// (sentinelReadHook); with Config.ReadFrom only.
	layerSentinelReads
	// layerReplicas sends reads to a cluster node's replicas (replicaHook);
	// with Config.ReadFrom only.
	layerReplicas
	// layerGuard is the node guard (nodeGuard).
	layerGuard
	// layerFacadeGuard is the facade's step and then the node guard's, one
	// frame for both (nodeGuard.facade): layerFacade outside layerGuard.
	layerFacadeGuard
	// layerUserFacadeGuard is layerFacadeGuard running the user's process
	// and pipeline hooks outside both steps while there are any
	// (nodeGuard.user): where nothing sits between the user's dial layer and
	// the guard.
	layerUserFacadeGuard
	// layerFacadeGuardTx and layerUserFacadeGuardTx are those on a client
	// whose every chain is a Watch transaction's (nodeGuard.tx): the facade's
	// step refuses the blocking commands sent there.
	layerFacadeGuardTx
	layerUserFacadeGuardTx
	// layerGuardSubscriptions is the guard of a client that runs
	// subscriptions alone (nodeGuard.subscriptions): every dial it sees is
	// a subscription's, and every handshake a subscription connection's.
	layerGuardSubscriptions
	// layerUserSubscriptions runs the user's hooks on a Standalone or
	// Sentinel subscriptions client, putting no set-up mark back on their
	// errors (userHooks.subscriptionLayer).
	layerUserSubscriptions
	// layerStepCount counts a cluster command's steps (stepCountHook).
	layerStepCount
	// layerFacade is the facade's step (facadeHook) as a hook of its own.
	layerFacade
	// layerDivergence ends redirect cycles (divergenceHook).
	layerDivergence
	// layerBudget admits subscription dials (subscriptionBudget).
	layerBudget
	// layerSocket hands a dedicated connection its socket (socketHook).
	layerSocket
	// layerQuiet keeps a one-off client's failed dials out of go-redis's
	// log (quietDial).
	layerQuiet
	// layerTxGuard refuses the long commands sent on a Cluster Watch's Tx
	// (watchGuard), which runs on a node client below the facade.
	layerTxGuard
	// layerExtensions are the hooks Instrument's functions add, which
	// go-redis appends innermost (on a cluster client's node clients too).
	// A client gets the functions registered when it is built; the
	// ordinary client, built before Instrument can be called, gets each
	// when it is registered.
	layerExtensions
)

var layerNames = [...]string{
	layerUser:               "user",
	layerUserDials:          "user dials",
	layerPending:            "pending",
	layerSentinel:           "sentinel master",
	layerSentinelReads:      "sentinel reads [ReadFrom]",
	layerReplicas:           "replicas [ReadFrom]",
	layerGuard:              "guard",
	layerFacadeGuard:        "facade+guard",
	layerUserFacadeGuard:    "user+facade+guard",
	layerFacadeGuardTx:      "facade+guard on a Tx",
	layerUserFacadeGuardTx:  "user+facade+guard on a Tx",
	layerGuardSubscriptions: "guard for subscriptions",
	layerUserSubscriptions:  "user for subscriptions",
	layerStepCount:          "step count",
	layerFacade:             "facade",
	layerDivergence:         "divergence",
	layerBudget:             "subscription budget",
	layerSocket:             "socket",
	layerQuiet:              "quiet dial",
	layerTxGuard:            "tx guard",
	layerExtensions:         "extensions",
}

func (l layer) String() string { return layerNames[l] }

// chainLevel says which go-redis client of a kind a chain is on: a cluster
// client's own, or each of its node clients'.
type chainLevel uint8

const (
	levelClient chainLevel = iota // the client itself; a cluster client's own hooks
	levelNode                     // each node client of a cluster client
	levelTx                       // each Tx a Watch runs on (Client.Watch adds it)
)

// chain is the hook order of one client kind in one mode, outermost first.
type chain struct {
	kind    clientKind
	mode    Mode // ModeAuto: in every mode
	level   chainLevel
	pending bool // Standalone while ModeAuto waits for the server's answer
	layers  []layer
}

// hookOrder is every chain a Client builds: newGoRedis installs each
// client's hooks from it and from nothing else, and TestHookOrderGolden
// prints it.
//
// The user's hooks are outermost, so they see each command once, with the
// error the caller gets; their process and pipeline hooks run on the
// ordinary client alone, where every command enters, so a blocking command
// that the facade hands to the long client is not seen again there.
// Extensions sit innermost and see what go-redis sends and returns: a
// blocking command once, on its dedicated connection.
//
// Every mode has one order: the user's hooks, then the facade's step, then
// the node guard's, then go-redis. The facade hands a long command to the
// long budget before any guard sees it, and the long client's guards, and
// those of its dedicated connections, admit and score it on the one node
// set; the facade's ride-out sends a refused command through the guard
// again, admitted afresh each time; and the guard types a failure for its
// node (callerError) before the facade translates it for the caller. In
// Cluster mode the node is only known on the node clients, so the guard sits
// there, inside every cluster-level hook, and the facade is a hook of its
// own on the cluster client. In Standalone and Sentinel mode both are on the
// one client, and one frame runs both steps in that order (facade+guard),
// with the user's hooks outside them where nothing sits between
// (user+facade+guard).
var hookOrder = []chain{
	{kind: clientOrdinary, mode: ModeStandalone, layers: []layer{layerUserDials, layerUserFacadeGuard, layerExtensions}},
	{kind: clientOrdinary, mode: ModeStandalone, pending: true, layers: []layer{layerUser, layerPending, layerFacadeGuard, layerExtensions}},
	{kind: clientOrdinary, mode: ModeSentinel, layers: []layer{layerUser, layerSentinel, layerSentinelReads, layerFacadeGuard, layerExtensions}},
	{kind: clientOrdinary, mode: ModeCluster, layers: []layer{layerUser, layerStepCount, layerFacade, layerDivergence, layerExtensions}},
	{kind: clientOrdinary, mode: ModeCluster, level: levelNode, layers: []layer{layerUserDials, layerReplicas, layerGuard}},

	// A Tx's reads stay with the watched master: no replica reads.
	{kind: clientWatch, mode: ModeStandalone, layers: []layer{layerUserDials, layerUserFacadeGuardTx, layerExtensions}},
	{kind: clientWatch, mode: ModeStandalone, pending: true, layers: []layer{layerUser, layerPending, layerFacadeGuardTx, layerExtensions}},
	{kind: clientWatch, mode: ModeSentinel, layers: []layer{layerUser, layerSentinel, layerFacadeGuardTx, layerExtensions}},
	// A Cluster Tx runs on a node client, whose chain it clones, and gets
	// this layer innermost (go-redis appends a Tx's own hooks).
	{kind: clientWatch, mode: ModeCluster, level: levelTx, layers: []layer{layerTxGuard}},

	{kind: clientLong, mode: ModeStandalone, layers: []layer{layerUserDials, layerGuard, layerExtensions}},
	{kind: clientLong, mode: ModeSentinel, layers: []layer{layerUserDials, layerSentinel, layerGuard, layerExtensions}},
	{kind: clientLong, mode: ModeCluster, layers: []layer{layerStepCount, layerDivergence, layerExtensions}},
	{kind: clientLong, mode: ModeCluster, level: levelNode, layers: []layer{layerUserDials, layerGuard}},

	{kind: clientSubscriptions, mode: ModeStandalone, layers: []layer{layerUserSubscriptions, layerGuardSubscriptions, layerBudget, layerExtensions}},
	{kind: clientSubscriptions, mode: ModeSentinel, layers: []layer{layerUserSubscriptions, layerSentinel, layerGuardSubscriptions, layerBudget, layerExtensions}},
	{kind: clientSubscriptions, mode: ModeCluster, layers: []layer{layerStepCount, layerDivergence, layerExtensions}},
	{kind: clientSubscriptions, mode: ModeCluster, level: levelNode, layers: []layer{layerUserDials, layerGuardSubscriptions, layerBudget}},
	{kind: clientSharded, mode: ModeCluster, layers: []layer{layerStepCount, layerDivergence, layerExtensions}},
	{kind: clientSharded, mode: ModeCluster, level: levelNode, layers: []layer{layerUserDials, layerGuardSubscriptions, layerBudget}},

	{kind: clientDedicated, mode: ModeAuto, layers: []layer{layerUserDials, layerGuard, layerSocket, layerExtensions}},
	{kind: clientReplica, mode: ModeSentinel, layers: []layer{layerUserDials, layerGuard, layerExtensions}},
	{kind: clientProbe, mode: ModeAuto, layers: []layer{layerQuiet}},
	{kind: clientSentinelQuestion, mode: ModeAuto, layers: []layer{layerQuiet}},
}

// chainOf returns the chain of kind in mode at level.
func chainOf(kind clientKind, mode Mode, level chainLevel, pending bool) chain {
	for _, ch := range hookOrder {
		if ch.kind == kind && (ch.mode == mode || ch.mode == ModeAuto) && ch.level == level && ch.pending == pending {
			return ch
		}
	}
	panic(fmt.Sprintf("redisguard: no hook order for %s clients in %s mode", kind, mode))
}

// chainHooks is what one client's layers are made of; a layer whose part
// is missing (replica reads without ReadFrom) is left out.
type chainHooks struct {
	user     *userHooks
	pending  *pendingMode
	sentinel *sentinelMaster
	replicas *replicas
	guard    nodeGuard
	facade   *facade
	budget   subscriptionBudget
	div      divergenceHook
	socket   socketHook
	quiet    *quietDial
	ext      *extensions
	role     ClientRole
	addr     string // the node client's address (replica reads)
}

// install adds ch's hooks to cl, outermost first.
func (ch chain) install(cl hooked, p chainHooks) {
	for _, l := range ch.layers {
		switch l {
		case layerUser:
			cl.AddHook(p.user.layer(true))
		case layerUserDials:
			cl.AddHook(p.user.layer(false))
		case layerPending:
			cl.AddHook(p.pending)
		case layerSentinel:
			cl.AddHook(p.sentinel)
		case layerSentinelReads:
			if p.replicas != nil {
				cl.AddHook(sentinelReadHook{r: p.replicas, sm: p.sentinel})
			}
		case layerReplicas:
			if p.replicas != nil {
				cl.AddHook(p.replicas.register(p.addr, cl.(*redis.Client)))
			}
		case layerGuard:
			cl.AddHook(p.guard)
		case layerFacadeGuard:
			g := p.guard
			g.facade = p.facade
			cl.AddHook(g)
		case layerUserFacadeGuard:
			g := p.guard
			g.facade, g.user = p.facade, p.user
			cl.AddHook(g)
		case layerFacadeGuardTx:
			g := p.guard
			g.facade, g.tx = p.facade, true
			cl.AddHook(g)
		case layerUserFacadeGuardTx:
			g := p.guard
			g.facade, g.user, g.tx = p.facade, p.user, true
			cl.AddHook(g)
		case layerGuardSubscriptions:
			g := p.guard
			g.subscriptions = true
			cl.AddHook(g)
		case layerUserSubscriptions:
			cl.AddHook(p.user.subscriptionLayer())
		case layerStepCount:
			cl.AddHook(stepCountHook{cl.(*redis.ClusterClient)})
		case layerFacade:
			cl.AddHook(facadeHook{p.facade})
		case layerDivergence:
			cl.AddHook(p.div)
		case layerBudget:
			if p.budget.subs != nil {
				cl.AddHook(p.budget)
			}
		case layerSocket:
			cl.AddHook(p.socket)
		case layerQuiet:
			cl.AddHook(p.quiet)
		case layerTxGuard:
			cl.AddHook(watchGuard{})
		case layerExtensions:
			p.ext.apply(cl.(redis.UniversalClient), p.role)
		}
	}
}

// hookOrderText prints hookOrder, one chain a line.
func hookOrderText() string {
	var b strings.Builder
	for _, ch := range hookOrder {
		mode := ch.mode.String()
		if ch.mode == ModeAuto {
			mode = "every mode"
		}
		where := ""
		switch {
		case ch.level == levelNode:
			where = " (node clients)"
		case ch.level == levelTx:
			where = " (each Tx)"
		case ch.mode == ModeCluster:
			where = " (cluster client)"
		case ch.pending:
			where = " (ModeAuto waiting)"
		}
		names := make([]string, len(ch.layers))
		for i, l := range ch.layers {
			names[i] = l.String()
		}
		fmt.Fprintf(&b, "%-18s %-30s %s\n", ch.kind, mode+where, strings.Join(names, ", "))
	}
	return b.String()
}
