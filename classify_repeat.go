package redisguard

import (
	"bytes"

	"github.com/redis/go-redis/v9"
)

// Which commands may be sent a second time after a failure that left their
// outcome unknown (repeat.go says when that is).

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

	// Reads, which replica routing shares (knownReads).
	add(nil, readCommands...)
	add(nil, laterReadCommands...)
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

// readCommands are the commands Redis 7.0's COMMAND flags readonly, and for
// commands with subcommands the pairs as COMMAND spells them, checked
// against a live server by TestRepeatableAgreesWithCommandFlags. They are
// repeatable, and they are what replica routing takes for reads when the
// servers do not say (knownReads).
var readCommands = []string{
	"BITCOUNT", "BITFIELD_RO", "BITPOS", "DBSIZE", "DUMP", "EVAL_RO", "EVALSHA_RO", "EXISTS",
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
	"ZSCORE", "ZUNION",
}

// laterReadCommands are the reads of later Redis versions (hash field TTLs
// in 7.4, vector sets in 8.0, DIGEST in 8.4) and of the modules go-redis has
// helpers for, as their COMMAND flags them.
var laterReadCommands = []string{
	"HTTL", "HPTTL", "HEXPIRETIME", "HPEXPIRETIME", "DIGEST",
	"VCARD", "VDIM", "VEMB", "VGETATTR", "VINFO", "VISMEMBER", "VLINKS", "VRANDMEMBER", "VSIM",
	"JSON.GET", "JSON.MGET", "JSON.TYPE", "JSON.STRLEN", "JSON.OBJLEN", "JSON.OBJKEYS", "JSON.ARRLEN",
	"JSON.ARRINDEX", "TS.GET", "TS.MGET", "TS.RANGE", "TS.REVRANGE", "TS.MRANGE", "TS.MREVRANGE",
	"TS.INFO", "TS.QUERYINDEX", "TS.READ", "BF.EXISTS", "BF.MEXISTS", "BF.INFO", "BF.CARD",
	"CF.EXISTS", "CF.MEXISTS", "CF.COUNT", "CF.INFO", "CMS.QUERY", "CMS.INFO", "TOPK.QUERY",
	"TOPK.LIST", "TOPK.INFO", "TDIGEST.CDF", "TDIGEST.QUANTILE", "TDIGEST.MIN", "TDIGEST.MAX",
	"TDIGEST.INFO", "TDIGEST.RANK", "TDIGEST.REVRANK", "TDIGEST.BYRANK", "TDIGEST.BYREVRANK",
	"TDIGEST.TRIMMED_MEAN", "FT.SEARCH", "FT.AGGREGATE", "FT.INFO", "FT._LIST", "FT.EXPLAIN",
	"FT.EXPLAINCLI", "FT.SPELLCHECK", "FT.SUGGET", "FT.SUGLEN", "FT.TAGVALS", "FT.DICTDUMP",
	"FT.SYNDUMP",
}

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
