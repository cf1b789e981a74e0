package redisguard

import (
	"context"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What a command's name and arguments tell the guard: which capacity budget
// it runs on (its class), and whether it is safe to send a second time
// (repeatable). Every rule that looks at a command's name lives here.

// cmdClass says which capacity budget a command must run on. Blocking and
// holding commands draw from a separate "long" budget so that a crowd of
// BLPOPs or subscriptions, each of which may occupy a connection for
// minutes, can never take every connection away from ordinary traffic.
type cmdClass uint8

const (
	// classOrdinary commands get their reply as soon as the server has run
	// them; they use the ordinary budget.
	classOrdinary cmdClass = iota
	// classBlocking commands may park on the server until data arrives or
	// their own timeout expires. They hold a long permit for the duration
	// of the call.
	classBlocking
	// classHolding commands (the SUBSCRIBE family, MONITOR) turn the
	// connection into a push stream that stays open until the PubSub or
	// the connection is closed, so the long permit is held until then.
	classHolding
)

func (c cmdClass) String() string {
	switch c {
	case classOrdinary:
		return "ordinary"
	case classBlocking:
		return "blocking"
	case classHolding:
		return "holding"
	}
	return "cmdClass(" + strconv.Itoa(int(c)) + ")"
}

// commandKind is what a command name alone tells us. Most names decide the
// class outright; a few only say where to look next.
type commandKind uint8

const (
	kindOrdinary commandKind = iota
	kindBlocking
	kindHolding
	// kindStreamRead (XREAD, XREADGROUP) blocks only with a BLOCK option.
	kindStreamRead
	// kindTSRead (TS.READ, RedisTimeSeries) blocks only with a BLOCK option.
	kindTSRead
	// The transaction markers matter only to batchIsBlocking.
	kindMulti
	kindExec
	kindDiscard
)

// keyword pairs an upper-case token with what it means in one context. The
// tables below are scanned linearly: each is a handful of entries, and a
// length check plus a first-byte compare rejects almost every miss.
type keyword struct {
	name string // upper case; matched ASCII-case-insensitively
	kind uint8
}

// commandsByLen indexes the interesting command names by length, so an
// ordinary command costs one length lookup and, at most, a few failed byte
// compares; names of other lengths (GET, SET, HGETALL, ...) never reach a
// compare at all.
//
// The blocking list is every command that parks the connection until data
// or its own timeout arrives: the B*POP/B*MOVE list and sorted-set commands,
// and WAIT/WAITAOF, which wait for replicas or the AOF. BLMOVEM is the
// Redis 8.10 multi-element BLMOVE; go-redis v9.23 has a typed helper for it.
//
// Only SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and MONITOR hold: they open the
// push stream. The UNSUBSCRIBE family and RESET stay ordinary because they
// only shrink or end a stream that a holding command already paid for;
// counting them would charge the long budget twice. Subcommands never
// matter here (SENTINEL MONITOR, CLIENT PAUSE and the like are ordinary), so
// only the first argument is looked at.
var commandsByLen = func() [11][]keyword {
	var t [11][]keyword
	for _, k := range []keyword{
		{"BLPOP", uint8(kindBlocking)},
		{"BRPOP", uint8(kindBlocking)},
		{"BRPOPLPUSH", uint8(kindBlocking)},
		{"BLMOVE", uint8(kindBlocking)},
		{"BLMOVEM", uint8(kindBlocking)},
		{"BLMPOP", uint8(kindBlocking)},
		{"BZPOPMIN", uint8(kindBlocking)},
		{"BZPOPMAX", uint8(kindBlocking)},
		{"BZMPOP", uint8(kindBlocking)},
		{"WAIT", uint8(kindBlocking)},
		{"WAITAOF", uint8(kindBlocking)},
		{"SUBSCRIBE", uint8(kindHolding)},
		{"PSUBSCRIBE", uint8(kindHolding)},
		{"SSUBSCRIBE", uint8(kindHolding)},
		{"MONITOR", uint8(kindHolding)},
		{"XREAD", uint8(kindStreamRead)},
		{"XREADGROUP", uint8(kindStreamRead)},
		{"TS.READ", uint8(kindTSRead)},
		{"MULTI", uint8(kindMulti)},
		{"EXEC", uint8(kindExec)},
		{"DISCARD", uint8(kindDiscard)},
	} {
		t[len(k.name)] = append(t[len(k.name)], k)
	}
	return t
}()

// Option kinds shared by the option tables.
const (
	optOther uint8 = iota // a flag such as NOACK, or a token we do not know
	optBlock              // the BLOCK option: the command may block
	optEnd                // STREAMS: keys and IDs follow, no more options
	optSkip1              // an option followed by one value
	optSkip2              // an option followed by two values (GROUP)
)

// streamReadOptions is the option section of XREAD and XREADGROUP as Redis
// parses it (t_stream.c, xreadCommand): options in any order from argv[1]
// until STREAMS. GROUP takes the group and consumer names; COUNT, BLOCK and
// the Redis 8 CLAIM, MAXCOUNT and MAXSIZE take one value each, which is what
// go-redis's XRead and XReadGroup emit. Skipping values is what keeps a
// group or consumer literally named "BLOCK" or "STREAMS" from being read as
// a keyword.
var streamReadOptions = []keyword{
	{"BLOCK", optBlock},
	{"STREAMS", optEnd},
	{"GROUP", optSkip2},
	{"COUNT", optSkip1},
	{"CLAIM", optSkip1},
	{"MAXCOUNT", optSkip1},
	{"MAXSIZE", optSkip1},
	{"NOACK", optOther},
}

// tsReadOptions is the option section of TS.READ key timestamp [BLOCK
// timeout mincount] [MAX_COUNT n], which go-redis's TSReadWithArgs emits.
var tsReadOptions = []keyword{
	{"BLOCK", optBlock},
	{"MAX_COUNT", optSkip1},
}

// classifyArgs classifies a command by its arguments as Cmder.Args returns
// them: the name first, in any case, as string, []byte or *string (the forms
// go-redis's encoder writes as bulk strings and its own Name() reads). Any
// other first argument cannot be a known command name, so the command is
// ordinary; that includes encoding.BinaryMarshaler values, whose bytes we
// would have to allocate (and run user code) to see. Malformed lists never
// panic and never error: Redis reports its own errors, and an unknown
// command costs the guard nothing by being ordinary.
func classifyArgs(args []interface{}) cmdClass {
	if len(args) == 0 {
		return classOrdinary
	}
	return classOf(argCommandKind(args[0]), args)
}

// classifyCmd classifies a go-redis command.
func classifyCmd(cmd redis.Cmder) cmdClass {
	if cmd == nil {
		return classOrdinary
	}
	return classifyArgs(cmd.Args())
}

func classOf(k commandKind, args []interface{}) cmdClass {
	switch k {
	case kindBlocking:
		return classBlocking
	case kindHolding:
		return classHolding
	case kindStreamRead:
		// XREAD and XREADGROUP are far more often used without BLOCK, and
		// then they return at once, so the name alone must not send them
		// to the long budget.
		if hasBlockOption(args, 1, streamReadOptions) {
			return classBlocking
		}
	case kindTSRead:
		// argv[1] and argv[2] are the key and the timestamp: user data that
		// may spell BLOCK, so the options start at argv[3].
		if hasBlockOption(args, 3, tsReadOptions) {
			return classBlocking
		}
	}
	return classOrdinary
}

// hasBlockOption reports whether the option section args[start:] contains
// BLOCK. Only option positions are examined: keys, IDs and option values
// are user data, and "XREAD STREAMS BLOCK 0" reads a stream named BLOCK
// without blocking. The timeout itself is never parsed: the option's
// presence is what makes Redis block, and a missing or malformed timeout is
// Redis's error to report, not ours.
//
// A token that is not in the table is stepped over as a one-word flag.
// Redis rejects such a command, but if a newer Redis adds an option we do
// not know yet, stepping over it keeps a later BLOCK visible; erring towards
// blocking costs a long permit, erring the other way lets blocking calls
// starve ordinary traffic.
func hasBlockOption(args []interface{}, start int, options []keyword) bool {
	return blockOption(args, start, options) >= 0
}

// blockOption returns the position of BLOCK in the option section
// args[start:] (see hasBlockOption), or -1.
func blockOption(args []interface{}, start int, options []keyword) int {
	for i := start; i < len(args); i++ {
		switch argKeyword(args[i], options) {
		case optBlock:
			return i
		case optEnd:
			return -1
		case optSkip1:
			i++
		case optSkip2:
			i += 2
		}
	}
	return -1
}

// batchIsBlocking reports whether a pipeline must run on the long budget:
// whether any of its commands blocks or holds when Redis runs it.
//
// A blocking command between MULTI and EXEC does not count. Redis queues it
// and runs it inside EXEC, where it never blocks: the pops and XREAD BLOCK
// answer at once as if their timeout had expired, and the rest reply or fail
// at once. So a go-redis transaction (TxPipeline) of blocking commands is
// ordinary. The MULTI/EXEC state is tracked command by command, so a raw
// pipeline that sends a blocking command after its own EXEC or DISCARD is
// still caught.
//
// A holding command counts even inside MULTI: Redis allows SUBSCRIBE and
// MONITOR in a transaction, and after EXEC the connection is in push mode
// just the same.
//
// A batch of plain commands (plainCommand), the common one, is answered
// from their names alone: with no blocking or holding name in it, no
// MULTI/EXEC state can make it block.
func batchIsBlocking(cmds []redis.Cmder) bool {
	if allPlain(cmds) {
		return false
	}
	for it := range batchItems(cmds) {
		switch classOf(it.kind, it.args) {
		case classHolding:
			return true
		case classBlocking:
			if !it.queued {
				return true
			}
		}
	}
	return false
}

// isTxBatch reports whether cmds is a transaction as go-redis sends one:
// TxPipeline wraps the queued commands in MULTI ... EXEC before the
// pipeline hooks see them.
func isTxBatch(cmds []redis.Cmder) bool {
	if len(cmds) < 2 {
		return false
	}
	return cmdKind(cmds[0]) == kindMulti && cmdKind(cmds[len(cmds)-1]) == kindExec
}

// allPlain reports whether every command of cmds is plain (plainCommand).
func allPlain(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if cmd == nil || !plainCommand(cmd.Args()) {
			return false
		}
	}
	return true
}

// batchItem is one command of a batch, other than a transaction marker.
type batchItem struct {
	kind   commandKind
	args   []interface{}
	queued bool // sent between MULTI and its EXEC or DISCARD: Redis runs it inside EXEC
}

// batchItems yields a batch's commands but MULTI, EXEC, DISCARD and empty
// ones, each with whether the server queues it in a transaction.
func batchItems(cmds []redis.Cmder) iter.Seq[batchItem] {
	return func(yield func(batchItem) bool) {
		inMulti := false
		for _, cmd := range cmds {
			if cmd == nil {
				continue
			}
			args := cmd.Args()
			if len(args) == 0 {
				continue
			}
			k := argCommandKind(args[0])
			switch k {
			case kindMulti:
				inMulti = true
				continue
			case kindExec, kindDiscard:
				inMulti = false
				continue
			}
			if !yield(batchItem{kind: k, args: args, queued: inMulti}) {
				return
			}
		}
	}
}

func cmdKind(cmd redis.Cmder) commandKind {
	if cmd == nil {
		return kindOrdinary
	}
	args := cmd.Args()
	if len(args) == 0 {
		return kindOrdinary
	}
	return argCommandKind(args[0])
}

// argCommandKind looks a command name up without converting it: no
// strings.ToLower, no string([]byte), so classifying allocates nothing.
func argCommandKind(arg interface{}) commandKind {
	switch v := arg.(type) {
	case string:
		return nameKind(v)
	case []byte:
		return nameKind(v)
	case *string:
		if v != nil {
			return nameKind(*v)
		}
	}
	return kindOrdinary
}

func nameKind[T string | []byte](name T) commandKind {
	if len(name) >= len(commandsByLen) {
		return kindOrdinary
	}
	return commandKind(lookupKeyword(name, commandsByLen[len(name)]))
}

// argKeyword returns the kind of the table entry that arg spells, or 0 (the
// "nothing special" kind in every table) when it spells none or is not a
// string-like value at all (numbers, nil, durations...).
func argKeyword(arg interface{}, table []keyword) uint8 {
	switch v := arg.(type) {
	case string:
		return lookupKeyword(v, table)
	case []byte:
		return lookupKeyword(v, table)
	case *string:
		if v != nil {
			return lookupKeyword(*v, table)
		}
	}
	return 0
}

func lookupKeyword[T string | []byte](tok T, table []keyword) uint8 {
	for _, k := range table {
		if equalFoldUpper(tok, k.name) {
			return k.kind
		}
	}
	return 0
}

// equalFoldUpper reports whether s equals upper (an upper-case ASCII
// keyword) ignoring ASCII case. It is ASCII-only on purpose: Redis compares
// command names and options with strcasecmp, so the Kelvin sign or a long s
// must not match the way they would under Unicode folding.
func equalFoldUpper[T string | []byte](s T, upper string) bool {
	if len(s) != len(upper) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// isHandshake reports whether cmd sets up a fresh connection: it is one of
// the commands go-redis's initConn sends before the connection carries
// anything (goRedisHandshake), or one named like them that the Options'
// OnConnect sends, which runs at the end of that set-up (duringSetUp
// marks its context). Those run through the node's hooks from inside the
// operation that needed the connection, which is admitted and scored
// itself; gating and scoring them again would count one operation twice,
// and a handshake's success would reset the failure count of a node that
// accepts connections and then fails every command. Every other command,
// CLIENT UNBLOCK and the bare HELLO admission asks included, is gated and
// scored like any other.
func isHandshake(ctx context.Context, cmd redis.Cmder) bool {
	return goRedisHandshake(cmd) || (namedLikeHandshake(cmd) && settingUp(ctx))
}

// goRedisHandshake reports whether cmd has the form of a command go-redis
// sends while it sets up a connection (redis.go, baseClient.initConn, in
// v9.23): built by go-redis's typed helper, as initConn builds it, with
// that helper's arguments. HELLO comes with a protocol version (admission's
// bare HELLO has none), AUTH only when HELLO was refused, then SELECT,
// READONLY, CLIENT SETNAME and CLIENT TRACKING in one pipeline, CLIENT
// MAINT_NOTIFICATIONS, and the two CLIENT SETINFO in another. Do builds a
// *redis.Cmd, so a caller's Do of the same words is not a set-up command; a
// caller's typed Hello, Auth, Select or ClientSetName on a Conn or a Tx is
// taken for one. TestHandshakeCommandsAreRecognised records what go-redis
// sends and fails when a release adds a step this does not know.
func goRedisHandshake(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) == 0 {
		return false
	}
	name, ok := args[0].(string)
	if !ok {
		return false
	}
	switch {
	case equalFoldUpper(name, "HELLO"):
		_, isMap := cmd.(*redis.MapStringInterfaceCmd)
		_, version := argInt(args, 1)
		return isMap && version
	case equalFoldUpper(name, "AUTH"):
		return isStatus(cmd) && (len(args) == 2 || len(args) == 3)
	case equalFoldUpper(name, "SELECT"):
		_, index := argInt(args, 1)
		return isStatus(cmd) && len(args) == 2 && index
	case equalFoldUpper(name, "READONLY"):
		return isStatus(cmd) && len(args) == 1
	case equalFoldUpper(name, "CLIENT"):
		sub, _ := argString(args, 1)
		switch {
		case equalFoldUpper(sub, "SETNAME"):
			_, isBool := cmd.(*redis.BoolCmd)
			return isBool && len(args) == 3
		case equalFoldUpper(sub, "SETINFO"), equalFoldUpper(sub, "TRACKING"), equalFoldUpper(sub, "MAINT_NOTIFICATIONS"):
			return isStatus(cmd)
		}
	}
	return false
}

// isStatus reports whether cmd is a *redis.StatusCmd, as the typed helpers
// of AUTH, SELECT, READONLY and most CLIENT subcommands build.
func isStatus(cmd redis.Cmder) bool {
	_, ok := cmd.(*redis.StatusCmd)
	return ok
}

// argString returns args[i] if it is a string.
func argString(args []interface{}, i int) (string, bool) {
	if i >= len(args) {
		return "", false
	}
	s, ok := args[i].(string)
	return s, ok
}

// argInt returns args[i] if it is an int, as go-redis's helpers pass
// protocol versions and database indexes.
func argInt(args []interface{}, i int) (int, bool) {
	if i >= len(args) {
		return 0, false
	}
	n, ok := args[i].(int)
	return n, ok
}

// handshakeNames are the names of the commands go-redis sends while
// initialising a connection.
var handshakeNames = []string{"AUTH", "HELLO", "CLIENT", "SELECT", "READONLY"}

// namedLikeHandshake reports whether cmd's name is one of the handshake's.
func namedLikeHandshake(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) == 0 {
		return false
	}
	name, ok := args[0].(string)
	return ok && slices.ContainsFunc(handshakeNames, func(h string) bool { return equalFoldUpper(name, h) })
}

// notPlain holds, by length, the names plainCommand turns away: the
// handshake's, CLUSTER (whose SLOTS the topology serves), and every name
// that commandsByLen gives a class other than ordinary.
var notPlain = func() [len(commandsByLen)][]string {
	var t [len(commandsByLen)][]string
	add := func(name string) { t[len(name)] = append(t[len(name)], name) }
	for _, name := range handshakeNames {
		add(name)
	}
	add("CLUSTER")
	for _, ks := range commandsByLen {
		for _, k := range ks {
			switch commandKind(k.kind) {
			case kindMulti, kindExec, kindDiscard: // ordinary as single commands
			default:
				add(k.name)
			}
		}
	}
	return t
}()

// plainCommand reports whether args, a command's arguments, surely name a
// command that needs nothing of the node guard beyond its common path: no
// handshake, no topology call, nothing the facade sends to the long budget.
// It is the guard's one look at a command, so it reads the name once and
// only as a string, which is how every go-redis helper names its command;
// any other form, and an empty list, report false, for the exact checks.
func plainCommand(args []interface{}) bool {
	if len(args) == 0 {
		return false
	}
	name, ok := args[0].(string)
	if !ok {
		return false
	}
	if len(name) >= len(notPlain) {
		return true
	}
	for _, np := range notPlain[len(name)] {
		if equalFoldUpper(name, np) {
			return false
		}
	}
	return true
}

// isHello reports whether cmd, a handshake command, is HELLO.
func isHello(cmd redis.Cmder) bool {
	name, _ := cmd.Args()[0].(string) // isHandshake has checked there is one
	return strings.EqualFold(name, "hello")
}

// isClusterSlots reports whether cmd is CLUSTER SLOTS, without allocating.
func isClusterSlots(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	a0, ok0 := args[0].(string)
	a1, ok1 := args[1].(string)
	return ok0 && ok1 && strings.EqualFold(a0, "cluster") && strings.EqualFold(a1, "slots")
}

// blockingKey returns the first key of a blocking command, which decides
// its node in Cluster mode; ok is false for the keyless WAIT and WAITAOF and
// for anything it cannot read.
func blockingKey(args []interface{}) (key string, ok bool) {
	if len(args) < 2 {
		return "", false
	}
	name, _ := args[0].(string)
	if b, isBytes := args[0].([]byte); isBytes {
		name = string(b)
	}
	pos := 1
	switch strings.ToLower(name) {
	case "wait", "waitaof":
		return "", false
	case "blmpop", "bzmpop": // timeout numkeys key...
		pos = 3
	case "xread": // [COUNT n] [BLOCK ms] STREAMS key... id...
		pos = afterToken(args, 1, "streams")
	case "xreadgroup": // GROUP group consumer [...] STREAMS key... id...
		pos = afterToken(args, 4, "streams")
	}
	if pos <= 0 || pos >= len(args) {
		return "", false
	}
	switch k := args[pos].(type) {
	case string:
		return k, true
	case []byte:
		return string(k), true
	}
	return "", false
}

// afterToken returns the position after the first argument from position
// from on that spells token, or 0.
func afterToken(args []interface{}, from int, token string) int {
	for i := from; i < len(args)-1; i++ {
		if s, ok := args[i].(string); ok && strings.EqualFold(s, token) {
			return i + 1
		}
	}
	return 0
}

// holdingErr explains why a holding command cannot run as sent.
func holdingErr(cmd redis.Cmder) error {
	if strings.EqualFold(cmd.Name(), "monitor") {
		return errMonitorCommand
	}
	return errSubscribeCommand
}

// isNodeAdmin reports whether cmd is one go-redis or redisguard sends to a
// particular node for its own purposes (the connection handshake, latency
// and loading PINGs, CLUSTER SLOTS, COMMAND, the replica lag's INFO,
// ASKING): a read that reaches a replica is routed (replica.go), these
// stay where they were sent.
func isNodeAdmin(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) == 0 {
		return true
	}
	name, ok := args[0].(string)
	if !ok {
		return false
	}
	switch len(name) {
	case 4:
		return strings.EqualFold(name, "ping") || strings.EqualFold(name, "info") || strings.EqualFold(name, "auth")
	case 5:
		return strings.EqualFold(name, "hello")
	case 6:
		return strings.EqualFold(name, "client") || strings.EqualFold(name, "select") || strings.EqualFold(name, "asking")
	case 7:
		return strings.EqualFold(name, "cluster") || strings.EqualFold(name, "command")
	case 8:
		return strings.EqualFold(name, "readonly")
	case 9:
		return strings.EqualFold(name, "readwrite")
	}
	return false
}
