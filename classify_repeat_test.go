package redisguard

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisguard/redisguard/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRepeatable pins which commands may be sent again after a failure that
// left their outcome unknown: a command is repeatable only when a second run
// leaves the data as the first did and answers the same (or is a pop).
func TestRepeatable(t *testing.T) {
	nx := "NX"
	for _, tc := range []struct {
		name string
		args []interface{}
		want bool
	}{
		// Reads, in any case and string form.
		{"GET", []interface{}{"get", "k"}, true},
		{"GET as bytes", []interface{}{[]byte("GET"), []byte("k")}, true},
		{"XREAD BLOCK", []interface{}{"xread", "block", 0, "streams", "s", "$"}, true},
		{"EVAL_RO", []interface{}{"eval_ro", "return 1", 0}, true},
		{"CLUSTER SLOTS", []interface{}{"cluster", "slots"}, true},
		{"CLUSTER slots as bytes", []interface{}{"CLUSTER", []byte("slots")}, true},
		{"CLUSTER FAILOVER", []interface{}{"cluster", "failover"}, false},
		{"CLUSTER alone", []interface{}{"cluster"}, false},
		{"PING", []interface{}{"ping"}, true},
		{"JSON.GET", []interface{}{"JSON.GET", "j", "$"}, true},

		// SET: repeatable unless conditional, with the condition as any
		// string form.
		{"SET", []interface{}{"set", "k", "v"}, true},
		{"SET the value NX", []interface{}{"set", "k", "nx"}, true},
		{"SET EX", []interface{}{"set", "k", "v", "ex", 10}, true},
		{"SET XX", []interface{}{"set", "k", "v", "xx", "exat", 1}, false}, // a past EXAT deletes: XX fails the second time
		{"SET KEEPTTL", []interface{}{"set", "k", "v", "keepttl"}, true},
		{"SET NX PX", []interface{}{"SET", "k", "v", "NX", "PX", 3000}, false},
		{"SET NX bytes", []interface{}{"SET", "k", "v", []byte("nx")}, false},
		{"SET NX *string", []interface{}{"SET", "k", "v", &nx}, false},
		{"SET GET", []interface{}{"set", "k", "v", "get"}, false},
		{"SET IFEQ", []interface{}{"set", "k", "v", "ifeq", "old"}, false},
		{"SET IFNE", []interface{}{"set", "k", "v", "IFNE", "old"}, false},
		{"SET IFDEQ", []interface{}{"set", "k", "v", []byte("IFDEQ"), "00ff00ff00ff00ff"}, false},
		{"SET IFDNE", []interface{}{"set", "k", "v", "ifdne", "00ff00ff00ff00ff"}, false},
		{"SETNX", []interface{}{"setnx", "k", "v"}, false},
		{"GETSET", []interface{}{"getset", "k", "v"}, false},
		{"MSET", []interface{}{"mset", "a", "1", "b", "2"}, true},
		{"MSETNX", []interface{}{"msetnx", "a", "1"}, false},
		{"HMSET", []interface{}{"hmset", "h", "f", "v"}, true},

		// MSETEX numkeys key value ... [NX|XX]: the pairs may spell NX.
		{"MSETEX", []interface{}{"msetex", 2, "a", "1", "b", "2", "ex", 10}, true},
		{"MSETEX XX", []interface{}{"msetex", "1", "a", "1", "xx"}, false},
		{"MSETEX NX", []interface{}{"msetex", 1, "a", "1", "nx"}, false},
		{"MSETEX NX bytes", []interface{}{"MSETEX", []byte("1"), "a", "1", []byte("NX"), "PX", 100}, false},
		{"MSETEX value NX", []interface{}{"msetex", 1, "a", "NX", "ex", 10}, true},
		{"MSETEX bad numkeys", []interface{}{"msetex", "x", "a", "1"}, false},
		{"MSETEX numkeys out of range", []interface{}{"msetex", 99, "a", "1"}, false},
		{"MSETEX cut short", []interface{}{"msetex"}, false},

		// HSETEX key [FNX|FXX] [EX...] FIELDS n field value ...
		{"HSETEX", []interface{}{"hsetex", "h", "ex", 10, "fields", 1, "f", "v"}, true},
		{"HSETEX FXX", []interface{}{"hsetex", "h", "fxx", "fields", 1, "f", "v"}, false},
		{"HSETEX FNX", []interface{}{"hsetex", "h", "FNX", "FIELDS", 1, "f", "v"}, false},
		{"HSETEX field named FNX", []interface{}{"hsetex", "h", "FIELDS", 1, "FNX", "v"}, true},
		{"HGETEX", []interface{}{"hgetex", "h", "persist", "fields", 1, "f"}, false},
		{"GETEX EX", []interface{}{"getex", "k", "ex", 10}, true},
		{"GETEX PERSIST", []interface{}{"getex", "k", "persist"}, true},
		{"GETEX EXAT", []interface{}{"getex", "k", "exat", 1}, false},
		{"GETEX PXAT bytes", []interface{}{"getex", "k", []byte("pxat"), 1}, false},
		{"HGETDEL", []interface{}{"hgetdel", "h", "fields", 1, "f"}, false},
		{"DELEX", []interface{}{"delex", "k"}, false},
		{"DELEX IFEQ", []interface{}{"delex", "k", "ifeq", "v"}, false},

		// EXPIRE: XX is met again, NX, GT and LT are not, and a time that
		// is not positive deletes the key.
		{"EXPIRE", []interface{}{"expire", "k", 10}, true},
		{"EXPIRE text", []interface{}{"expire", "k", "10"}, true},
		{"PEXPIRE XX", []interface{}{"pexpire", "k", int64(1500), "xx"}, true},
		{"EXPIRE NX", []interface{}{"expire", "k", 10, "nx"}, false},
		{"EXPIRE GT", []interface{}{"expire", "k", 10, "GT"}, false},
		{"PEXPIRE LT", []interface{}{"pexpire", "k", 10, []byte("lt")}, false},
		{"EXPIRE 0", []interface{}{"expire", "k", 0}, false},
		{"EXPIRE negative", []interface{}{"expire", "k", "-1"}, false},
		{"EXPIRE no time", []interface{}{"expire", "k"}, false},
		{"EXPIREAT", []interface{}{"expireat", "k", 1}, false},
		{"PERSIST", []interface{}{"persist", "k"}, false},

		// Writes that answer with what changed, or add again.
		{"DEL", []interface{}{"del", "k"}, false},
		{"SADD", []interface{}{"sadd", "s", "m"}, false},
		{"HSET", []interface{}{"hset", "h", "f", "v"}, false},
		{"ZADD", []interface{}{"zadd", "z", 1, "m"}, false},
		{"ZADD NX", []interface{}{"zadd", "z", "nx", 1, "m"}, false},
		{"ZADD INCR", []interface{}{"zadd", "z", "incr", 1, "m"}, false},
		{"SMOVE", []interface{}{"smove", "a", "b", "m"}, false},
		{"COPY", []interface{}{"copy", "a", "b"}, false},
		{"MOVE", []interface{}{"move", "k", 1}, false},
		{"RPUSH", []interface{}{"rpush", "q", "x"}, false},
		{"LPUSH", []interface{}{"LPUSH", "q", "x"}, false},
		{"INCR", []interface{}{"incr", "n"}, false},
		{"HINCRBY", []interface{}{"hincrby", "h", "f", 1}, false},
		{"PUBLISH", []interface{}{"publish", "ch", "m"}, false},
		{"XADD", []interface{}{"xadd", "s", "*", "f", "v"}, false},
		{"EVAL", []interface{}{"eval", "return 1", 0}, false},
		{"LTRIM", []interface{}{"ltrim", "q", 1, -1}, false},

		// Pops take the next element; a move onto the same list rotates.
		{"LPOP", []interface{}{"lpop", "q"}, true},
		{"BLPOP", []interface{}{"blpop", "q", 1}, true},
		{"LMOVE", []interface{}{"lmove", "a", "b", "left", "right"}, true},
		{"LMOVE same list", []interface{}{"LMOVE", "ring", "ring", "LEFT", "RIGHT"}, false},
		{"LMOVE same list string and bytes", []interface{}{"lmove", "ring", []byte("ring"), "left", "right"}, false},
		{"LMOVE same list bytes and string", []interface{}{"lmove", []byte("ring"), "ring", "left", "right"}, false},
		{"LMOVE same list bytes", []interface{}{"lmove", []byte("ring"), []byte("ring"), "left", "right"}, false},
		{"LMOVE case differs", []interface{}{"lmove", "ring", "RING", "left", "right"}, true},
		{"LMOVE number keys", []interface{}{"lmove", 1, 1, "left", "right"}, false},
		{"BLMOVE same list", []interface{}{"blmove", "q", "q", "left", "right", 0}, false},
		{"RPOPLPUSH", []interface{}{"rpoplpush", "a", "b"}, true},
		{"RPOPLPUSH same list", []interface{}{"rpoplpush", "a", "a"}, false},
		{"BRPOPLPUSH same list", []interface{}{"brpoplpush", "a", "a", 0}, false},
		{"RPOPLPUSH cut short", []interface{}{"rpoplpush", "a"}, false},
		{"XREADGROUP", []interface{}{"xreadgroup", "group", "g", "c", "streams", "s", ">"}, false},
		{"WAIT", []interface{}{"wait", 1, 0}, false},

		// Module counters and unknown commands are not repeated.
		{"TS.INCRBY", []interface{}{"TS.INCRBY", "ts", 1}, false},
		{"JSON.NUMINCRBY", []interface{}{"JSON.NUMINCRBY", "j", "$.n", 1}, false},
		{"JSON.ARRAPPEND", []interface{}{"JSON.ARRAPPEND", "j", "$.a", "1"}, false},
		{"CF.ADD", []interface{}{"CF.ADD", "cf", "x"}, false},
		{"CMS.INCRBY", []interface{}{"CMS.INCRBY", "cms", "x", 1}, false},
		{"JSON.SET", []interface{}{"JSON.SET", "j", "$", `{"a":1}`}, true},
		{"JSON.SET NX", []interface{}{"JSON.SET", "j", "$", `{"a":1}`, "NX"}, false},
		{"unknown", []interface{}{"no-such-command"}, false},
		{"unknown with argument", []interface{}{"no-such-command", "slots"}, false},

		// Malformed lists are never repeatable and never panic.
		{"nil args", nil, false},
		{"int name", []interface{}{42}, false},
		{"nil name", []interface{}{nil, "k"}, false},
		{"name longer than any known", []interface{}{strings.Repeat("G", 100)}, false},
		{"subcommand longer than any known", []interface{}{"cluster", strings.Repeat("s", 100)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, repeatableArgs(tc.args))
			assert.Equal(t, tc.want, repeatable(redis.NewCmd(context.Background(), tc.args...)), "as a Cmder")
		})
	}
	assert.False(t, repeatable(nil))
}

// TestRepeatableHelpers checks the conditional writes as go-redis's own
// helpers build them (the server need not know them: Redis 7.0 has none of
// the 7.4 and 8.x commands, nor the modules).
func TestRepeatableHelpers(t *testing.T) {
	ctx := context.Background()
	built := func(call func(c *redis.Client)) redis.Cmder {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		defer c.Close()
		cap := &captureHook{}
		c.AddHook(cap)
		call(c)
		require.NotNil(t, cap.cmd)
		return cap.cmd
	}
	for _, tc := range []struct {
		name string
		call func(c *redis.Client)
		want bool
	}{
		{"SetIFEQ", func(c *redis.Client) { c.SetIFEQ(ctx, "k", "new", "old", 0) }, false},
		{"SetIFNE", func(c *redis.Client) { c.SetIFNE(ctx, "k", "new", "old", time.Second) }, false},
		{"SetIFDEQ", func(c *redis.Client) { c.SetIFDEQ(ctx, "k", "new", 0xfeed, 0) }, false},
		{"SetIFDNE", func(c *redis.Client) { c.SetIFDNE(ctx, "k", "new", 0xfeed, 0) }, false},
		{"SetArgs IFEQ", func(c *redis.Client) { c.SetArgs(ctx, "k", "v", redis.SetArgs{Mode: "IFEQ", MatchValue: "old"}) }, false},
		{"SetArgs TTL", func(c *redis.Client) { c.SetArgs(ctx, "k", "v", redis.SetArgs{TTL: time.Second}) }, true},
		{"SetArgs XX", func(c *redis.Client) { c.SetArgs(ctx, "k", "v", redis.SetArgs{Mode: "XX", TTL: time.Second}) }, false},
		{"SetNX", func(c *redis.Client) { c.SetNX(ctx, "k", "v", time.Second) }, false},
		{"Set", func(c *redis.Client) { c.Set(ctx, "k", "v", time.Second) }, true},
		{"HSetEXWithArgs FNX", func(c *redis.Client) {
			c.HSetEXWithArgs(ctx, "h", &redis.HSetEXOptions{Condition: redis.HSetEXFNX}, "f", "v")
		}, false},
		{"HSetEXWithArgs FXX", func(c *redis.Client) {
			c.HSetEXWithArgs(ctx, "h", &redis.HSetEXOptions{Condition: redis.HSetEXFXX}, "f", "v")
		}, false},
		{"HSetEX", func(c *redis.Client) { c.HSetEX(ctx, "h", "FNX", "v") }, true}, // a field named FNX
		{"MSetEX NX", func(c *redis.Client) { c.MSetEX(ctx, redis.MSetEXArgs{Condition: redis.NX}, "a", "1", "b", "2") }, false},
		{"MSetEX", func(c *redis.Client) { c.MSetEX(ctx, redis.MSetEXArgs{}, "a", "NX") }, true}, // a value NX
		{"HGetDel", func(c *redis.Client) { c.HGetDel(ctx, "h", "f") }, false},
		{"DelExArgs", func(c *redis.Client) { c.DelExArgs(ctx, "k", redis.DelExArgs{Mode: "IFEQ", MatchValue: "v"}) }, false},
		{"ExpireNX", func(c *redis.Client) { c.ExpireNX(ctx, "k", time.Minute) }, false},
		{"ExpireXX", func(c *redis.Client) { c.ExpireXX(ctx, "k", time.Minute) }, true},
		{"Expire", func(c *redis.Client) { c.Expire(ctx, "k", time.Minute) }, true},
		{"PExpire", func(c *redis.Client) { c.PExpire(ctx, "k", 1500*time.Millisecond) }, true},
		{"TSIncrBy", func(c *redis.Client) { c.TSIncrBy(ctx, "ts", 1) }, false},
		{"JSONNumIncrBy", func(c *redis.Client) { c.JSONNumIncrBy(ctx, "j", "$.n", 1) }, false},
		{"JSONArrAppend", func(c *redis.Client) { c.JSONArrAppend(ctx, "j", "$.a", 1) }, false},
		{"CFAdd", func(c *redis.Client) { c.CFAdd(ctx, "cf", "x") }, false},
		{"CMSIncrBy", func(c *redis.Client) { c.CMSIncrBy(ctx, "cms", "x", 1) }, false},
		{"JSONSet", func(c *redis.Client) { c.JSONSet(ctx, "j", "$", 1) }, true},
		{"JSONGet", func(c *redis.Client) { c.JSONGet(ctx, "j", "$") }, true},
		{"TSRange", func(c *redis.Client) { c.TSRange(ctx, "ts", 0, 10) }, true},
		{"VSim", func(c *redis.Client) { c.VSim(ctx, "v", &redis.VectorValues{Val: []float64{1}}) }, true},
		{"LMove same list", func(c *redis.Client) { c.LMove(ctx, "ring", "ring", "LEFT", "RIGHT") }, false},
		{"ZAddArgsIncr", func(c *redis.Client) {
			c.ZAddArgsIncr(ctx, "z", redis.ZAddArgs{Members: []redis.Z{{Score: 1, Member: "m"}}})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := built(tc.call)
			assert.Equal(t, tc.want, repeatable(cmd), "%v", cmd.Args())
		})
	}
}

// TestRepeatableNameForms checks that every name the table holds is found
// in any ASCII case and string form.
func TestRepeatableNameForms(t *testing.T) {
	for name, check := range repeatableNames {
		if check != nil {
			continue // their arguments decide; TestRepeatable covers them
		}
		args := strings.SplitN(name, "|", 2)
		lower := strings.ToLower(args[0])
		for _, form := range []interface{}{args[0], lower, []byte(lower), &lower} {
			list := []interface{}{form}
			if len(args) == 2 {
				list = append(list, []byte(strings.ToLower(args[1])))
			}
			assert.True(t, repeatableArgs(list), "%s as %T", name, form)
		}
		assert.Less(t, len(name), maxRepeatableName, name)
	}
}

// TestRepeatableAgreesWithCommandFlags checks the table against what a live
// server says of its commands: every command it flags readonly is
// repeatable, and every command in the table that it flags write is one of
// the writes the table vouches for by name.
func TestRepeatableAgreesWithCommandFlags(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := testCtx(t, 10*time.Second)
	// Each entry: name, arity, flags, ..., and from Redis 7.0 on, at
	// index 9, the subcommands in the same shape ("cluster|slots").
	reply, err := srv.Admin().Do(ctx, "COMMAND").Slice()
	require.NoError(t, err)
	vouched := map[string]bool{
		"SETEX": true, "PSETEX": true, "MSET": true, "HMSET": true, "LSET": true, "SETRANGE": true,
		"PFMERGE": true, "GETEX": true, "FLUSHDB": true, "FLUSHALL": true, "SET": true, "EXPIRE": true,
		"PEXPIRE": true, "LPOP": true, "RPOP": true, "SPOP": true, "ZPOPMIN": true, "ZPOPMAX": true,
		"LMPOP": true, "ZMPOP": true, "BLPOP": true, "BRPOP": true, "BZPOPMIN": true, "BZPOPMAX": true,
		"BLMPOP": true, "BZMPOP": true, "LMOVE": true, "BLMOVE": true, "RPOPLPUSH": true, "BRPOPLPUSH": true,
	}
	seen := 0
	var check func(entry []interface{})
	check = func(entry []interface{}) {
		name := strings.ToUpper(entry[0].(string))
		var flags []string
		for _, f := range entry[2].([]interface{}) {
			flags = append(flags, f.(string))
		}
		_, listed := repeatableNames[name]
		if slices.Contains(flags, "readonly") {
			seen++
			assert.True(t, listed, "%s is flagged readonly but not repeatable", name)
		}
		if listed && slices.Contains(flags, "write") {
			assert.True(t, vouched[name], "%s writes, yet the table lists it", name)
		}
		if len(entry) > 9 {
			subs, _ := entry[9].([]interface{})
			for _, sub := range subs {
				check(sub.([]interface{}))
			}
		}
	}
	for _, entry := range reply {
		check(entry.([]interface{}))
	}
	assert.Greater(t, seen, 50, "the server reported too few readonly commands to check")
}
