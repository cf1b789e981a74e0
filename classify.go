package redisguard

import (
	"bytes"
	"strconv"

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

// isTxBatch reports whether cmds is a transaction as go-redis sends one:
// TxPipeline wraps the queued commands in MULTI ... EXEC before the
// pipeline hooks see them.
func isTxBatch(cmds []redis.Cmder) bool {
	if len(cmds) < 2 {
		return false
	}
	return cmdKind(cmds[0]) == kindMulti && cmdKind(cmds[len(cmds)-1]) == kindExec
}

// batchIsBlocking reports whether a pipeline must run on the long budget:
// whether any of its commands blocks or holds when Redis runs it.
//
// A blocking command between MULTI and EXEC does not count. Redis queues it
// and runs it inside EXEC, where it never blocks: the pops and XREAD BLOCK
// answer at once as if their timeout had expired, and the rest reply or fail
// at once. So a go-redis transaction (TxPipeline) of blocking commands is
// ordinary. The
// MULTI/EXEC state is tracked command by command rather than with
// isTxBatch, so a raw pipeline that sends a blocking command after its own
// EXEC or DISCARD is still caught.
//
// A holding command counts even inside MULTI: Redis allows SUBSCRIBE and
// MONITOR in a transaction, and after EXEC the connection is in push mode
// just the same.
func batchIsBlocking(cmds []redis.Cmder) bool {
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
		switch classOf(k, args) {
		case classHolding:
			return true
		case classBlocking:
			if !inMulti {
				return true
			}
		}
	}
	return false
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

// repeatable reports whether cmd may be sent again after a failure that left
// its outcome unknown (repeat.go says when that is). A command is repeatable
// only if it is known to be, by repeatableNames: a second run leaves the data
// as the first left it and answers the caller the same, or, for the pops,
// takes no more than the caller's own retry would. Every other command,
// unknown and module commands included, is not.
func repeatable(cmd redis.Cmder) bool {
	if cmd == nil {
		return false
	}
	return repeatableArgs(cmd.Args())
}

// repeatableArgs is repeatable for an argument list as Cmder.Args returns
// it. It allocates nothing: names are upper-cased into a buffer on the stack.
func repeatableArgs(args []interface{}) bool {
	if len(args) == 0 {
		return false
	}
	var buf [maxRepeatableName]byte
	name, ok := appendUpperArg(buf[:0], args[0])
	if !ok {
		return false
	}
	check, found := repeatableNames[string(name)]
	if !found && len(args) > 1 {
		// A subcommand, as COMMAND names it: CLUSTER|SLOTS.
		if name, ok = appendUpperArg(append(name, '|'), args[1]); ok {
			check, found = repeatableNames[string(name)]
		}
	}
	return found && (check == nil || check(args))
}

// maxRepeatableName bounds the names repeatableNames can hold; longer ones
// are not in it.
const maxRepeatableName = 40

// repeatableNames holds, in upper case, the commands known to be safe to run
// twice, and for commands with subcommands the pair as COMMAND spells it
// (CLUSTER|SLOTS). The value is the check the arguments must pass, or nil
// when the name decides alone.
var repeatableNames = func() map[string]func(args []interface{}) bool {
	m := make(map[string]func([]interface{}) bool)
	add := func(check func([]interface{}) bool, names ...string) {
		for _, name := range names {
			m[name] = check
		}
	}

	// Reads: the commands Redis 7.0's COMMAND flags readonly, checked
	// against a live server by TestRepeatableAgreesWithCommandFlags.
	add(nil, "BITCOUNT", "BITFIELD_RO", "BITPOS", "DBSIZE", "DUMP", "EVAL_RO", "EVALSHA_RO", "EXISTS",
		"EXPIRETIME", "FCALL_RO", "GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO",
		"GEOSEARCH", "GET", "GETBIT", "GETRANGE", "HEXISTS", "HGET", "HGETALL", "HKEYS", "HLEN", "HMGET",
		"HRANDFIELD", "HSCAN", "HSTRLEN", "HVALS", "KEYS", "LCS", "LINDEX", "LLEN", "LOLWUT", "LPOS",
		"LRANGE", "MEMORY|USAGE", "MGET", "OBJECT|ENCODING", "OBJECT|FREQ", "OBJECT|IDLETIME",
		"OBJECT|REFCOUNT", "PEXPIRETIME", "PFCOUNT", "PTTL", "RANDOMKEY", "SCAN", "SCARD", "SDIFF",
		"SINTER", "SINTERCARD", "SISMEMBER", "SMEMBERS", "SMISMEMBER", "SORT_RO", "SRANDMEMBER", "SSCAN",
		"STRLEN", "SUBSTR", "SUNION", "TOUCH", "TTL", "TYPE", "XINFO|CONSUMERS", "XINFO|GROUPS",
		"XINFO|STREAM", "XLEN", "XPENDING", "XRANGE", "XREAD", "XREVRANGE", "ZCARD", "ZCOUNT", "ZDIFF",
		"ZINTER", "ZINTERCARD", "ZLEXCOUNT", "ZMSCORE", "ZRANDMEMBER", "ZRANGE", "ZRANGEBYLEX",
		"ZRANGEBYSCORE", "ZRANK", "ZREVRANGE", "ZREVRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANK", "ZSCAN",
		"ZSCORE", "ZUNION")
	// Reads of later Redis versions (hash field TTLs in 7.4, vector sets in
	// 8.0, DIGEST in 8.4) and of the modules go-redis has helpers for.
	add(nil, "HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME", "DIGEST",
		"VCARD", "VDIM", "VEMB", "VGETATTR", "VINFO", "VISMEMBER", "VLINKS", "VRANDMEMBER", "VSIM",
		"JSON.GET", "JSON.MGET", "JSON.TYPE", "JSON.STRLEN", "JSON.OBJLEN", "JSON.OBJKEYS", "JSON.ARRLEN",
		"JSON.ARRINDEX", "TS.GET", "TS.MGET", "TS.RANGE", "TS.REVRANGE", "TS.MRANGE", "TS.MREVRANGE",
		"TS.INFO", "TS.QUERYINDEX", "TS.READ", "BF.EXISTS", "BF.MEXISTS", "BF.INFO", "BF.CARD",
		"CF.EXISTS", "CF.MEXISTS", "CF.COUNT", "CF.INFO", "CMS.QUERY", "CMS.INFO", "TOPK.QUERY",
		"TOPK.LIST", "TOPK.INFO", "TDIGEST.CDF", "TDIGEST.QUANTILE", "TDIGEST.MIN", "TDIGEST.MAX",
		"TDIGEST.INFO", "TDIGEST.RANK", "TDIGEST.REVRANK", "TDIGEST.BYRANK", "TDIGEST.BYREVRANK",
		"TDIGEST.TRIMMED_MEAN", "FT.SEARCH", "FT.AGGREGATE", "FT.INFO", "FT._LIST", "FT.EXPLAIN",
		"FT.EXPLAINCLI", "FT.SPELLCHECK", "FT.SUGGET", "FT.SUGLEN", "FT.TAGVALS", "FT.DICTDUMP",
		"FT.SYNDUMP")
	// Commands that read no key and change nothing: the server's and the
	// cluster's state, which go-redis itself asks for (CLUSTER SLOTS,
	// COMMAND, ROLE).
	add(nil, "PING", "ECHO", "TIME", "INFO", "LASTSAVE", "ROLE", "COMMAND", "CONFIG|GET",
		"CLUSTER|COUNTKEYSINSLOT", "CLUSTER|GETKEYSINSLOT", "CLUSTER|INFO", "CLUSTER|KEYSLOT",
		"CLUSTER|LINKS", "CLUSTER|MYID", "CLUSTER|MYSHARDID", "CLUSTER|NODES", "CLUSTER|REPLICAS",
		"CLUSTER|SHARDS", "CLUSTER|SLAVES", "CLUSTER|SLOTS", "PUBSUB|CHANNELS", "PUBSUB|NUMPAT",
		"PUBSUB|NUMSUB", "PUBSUB|SHARDCHANNELS", "PUBSUB|SHARDNUMSUB", "SCRIPT|EXISTS",
		"FUNCTION|LIST", "FUNCTION|DUMP", "FUNCTION|STATS", "MEMORY|STATS", "MEMORY|DOCTOR",
		"SLOWLOG|GET", "SLOWLOG|LEN", "ACL|CAT", "ACL|GETUSER", "ACL|LIST", "ACL|USERS", "ACL|WHOAMI",
		"MODULE|LIST")
	// Connection state and the transaction markers, which do nothing on
	// their own: a transaction is judged by what it holds (resendable).
	add(nil, "ASKING", "READONLY", "READWRITE", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH")

	// Writes whose second run leaves the data as the first left it and
	// answers the same. Writes that answer with a count of what changed
	// (DEL, SADD, HSET, ZADD...) answer 0 the second time and are left out,
	// as are those that add to what is there (INCR, RPUSH, APPEND...).
	add(nil, "SETEX", "PSETEX", "MSET", "HMSET", "LSET", "SETRANGE", "PFMERGE",
		"FLUSHDB", "FLUSHALL", "CONFIG|SET", "SCRIPT|LOAD")
	// Conditional writes are repeatable without their condition: after the
	// first run the condition answers differently (SET NX, SET IFEQ), or the
	// reply is the value the first run replaced (SET GET). XX is usually met
	// again, but not once an EXAT in the past has deleted the key.
	add(withoutOptions(3, "", setConditions), "SET")
	add(withoutOptions(4, "", jsonSetConditions), "JSON.SET")
	add(withoutOptions(2, "FIELDS", hsetexConditions), "HSETEX")
	add(msetexRepeatable, "MSETEX")
	add(expireRepeatable, "EXPIRE", "PEXPIRE")
	// GETEX answers the value again, unless an EXAT or PXAT in the past
	// deleted the key.
	add(withoutOptions(2, "", getexConditions), "GETEX")

	// Pops: a lost reply loses what the pop took whether or not it runs
	// again, and nothing can read it back; the second run takes the next
	// element, which is what the caller's own retry would do.
	add(nil, "LPOP", "RPOP", "SPOP", "ZPOPMIN", "ZPOPMAX", "LMPOP", "ZMPOP",
		"BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX", "BLMPOP", "BZMPOP")
	// A move onto another list is a pop too. Onto the same list it is a
	// rotation, which a second run turns once more.
	add(distinctLists, "LMOVE", "BLMOVE", "RPOPLPUSH", "BRPOPLPUSH")
	return m
}()

// Option tokens that make a write conditional (kind 1 in these tables).
var (
	setConditions     = []keyword{{"NX", 1}, {"XX", 1}, {"GET", 1}, {"IFEQ", 1}, {"IFNE", 1}, {"IFDEQ", 1}, {"IFDNE", 1}}
	jsonSetConditions = []keyword{{"NX", 1}}
	hsetexConditions  = []keyword{{"FNX", 1}, {"FXX", 1}}
	msetexConditions  = []keyword{{"NX", 1}, {"XX", 1}}
	expireConditions  = []keyword{{"NX", 1}, {"GT", 1}, {"LT", 1}}
	getexConditions   = []keyword{{"EXAT", 1}, {"PXAT", 1}}
)

// withoutOptions returns a check that passes when noCondition does.
func withoutOptions(from int, until string, conditions []keyword) func([]interface{}) bool {
	return func(args []interface{}) bool { return noCondition(args, from, until, conditions) }
}

// noCondition reports whether no argument from position from on, up to the
// token until if given (FIELDS, after which come field names and values),
// spells a condition. Scanning every token rather than parsing the options
// errs towards not repeating: a value that spells NX is Redis's syntax error
// or a condition's own argument.
func noCondition(args []interface{}, from int, until string, conditions []keyword) bool {
	for i := from; i < len(args); i++ {
		if until != "" && argSpells(args[i], until) {
			return true
		}
		if argKeyword(args[i], conditions) != 0 {
			return false
		}
	}
	return true
}

// argSpells reports whether a string-like argument spells upper, an
// upper-case token, in any ASCII case.
func argSpells(arg interface{}, upper string) bool {
	s, b, ok := argText(arg)
	switch {
	case !ok:
		return false
	case b != nil:
		return equalFoldUpper(b, upper)
	}
	return equalFoldUpper(s, upper)
}

// msetexRepeatable checks MSETEX numkeys key value [key value ...] [NX|XX]
// [EX...]: the options follow the pairs, which may spell anything.
func msetexRepeatable(args []interface{}) bool {
	n, ok := wholeNumber(args, 1)
	if !ok || n > int64(len(args)) {
		return false
	}
	return noCondition(args, 2+2*int(n), "", msetexConditions)
}

// expireRepeatable checks EXPIRE and PEXPIRE key time [NX|XX|GT|LT]. With a
// positive time XX is met again; NX, GT and LT are not. A time that is not
// positive deletes the key, and the second run answers that there was none.
func expireRepeatable(args []interface{}) bool {
	n, ok := wholeNumber(args, 2)
	return ok && n > 0 && noCondition(args, 3, "", expireConditions)
}

// distinctLists checks a list move (LMOVE, BLMOVE, RPOPLPUSH, BRPOPLPUSH
// source destination ...): repeatable when the source and the destination
// are known to differ, compared as text whether given as string or []byte.
func distinctLists(args []interface{}) bool {
	if len(args) < 3 {
		return false
	}
	a, aBytes, ok1 := argText(args[1])
	b, bBytes, ok2 := argText(args[2])
	if !ok1 || !ok2 {
		return false // numbers and other values: their text is the encoder's
	}
	switch {
	case aBytes != nil && bBytes != nil:
		return !bytes.Equal(aBytes, bBytes)
	case aBytes != nil:
		return string(aBytes) != b
	case bBytes != nil:
		return a != string(bBytes)
	}
	return a != b
}

// argText returns a string-like argument's text, as a string or as bytes
// (then non-nil), without copying it.
func argText(arg interface{}) (s string, b []byte, ok bool) {
	switch v := arg.(type) {
	case string:
		return v, nil, true
	case []byte:
		if v == nil {
			return "", nil, true
		}
		return "", v, true
	case *string:
		if v != nil {
			return *v, nil, true
		}
	}
	return "", nil, false
}

// wholeNumber reads args[i] as a whole number >= 0, given as a Go integer
// or as decimal text.
func wholeNumber(args []interface{}, i int) (int64, bool) {
	if i >= len(args) {
		return 0, false
	}
	var n int64
	switch v := args[i].(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case int32:
		n = int64(v)
	case uint32:
		n = int64(v)
	case string:
		return decimal(v)
	case []byte:
		return decimal(v)
	case *string:
		if v == nil {
			return 0, false
		}
		return decimal(*v)
	default:
		return 0, false
	}
	return n, n >= 0
}

// decimal parses digits only, as Redis's string2ll does for a positive
// number, refusing what might overflow.
func decimal[T string | []byte](s T) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// appendUpperArg appends a string-like argument's text, upper-cased (ASCII
// only, as Redis compares names), to dst. It reports false for other values
// and for text that does not fit in dst's capacity, so it never allocates.
func appendUpperArg(dst []byte, arg interface{}) ([]byte, bool) {
	switch v := arg.(type) {
	case string:
		return appendUpper(dst, v)
	case []byte:
		return appendUpper(dst, v)
	case *string:
		if v != nil {
			return appendUpper(dst, *v)
		}
	}
	return dst, false
}

func appendUpper[T string | []byte](dst []byte, s T) ([]byte, bool) {
	if len(dst)+len(s) > cap(dst) {
		return dst, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst, true
}
