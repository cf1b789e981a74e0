package redisguard

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// classifyNames lists every command the name alone classifies, with its
// class. The blocking stream and time-series reads are tested separately
// because their class depends on their options.
var classifyNames = []struct {
	name string
	want cmdClass
}{
	{"BLPOP", classBlocking},
	{"BRPOP", classBlocking},
	{"BRPOPLPUSH", classBlocking},
	{"BLMOVE", classBlocking},
	{"BLMOVEM", classBlocking},
	{"BLMPOP", classBlocking},
	{"BZPOPMIN", classBlocking},
	{"BZPOPMAX", classBlocking},
	{"BZMPOP", classBlocking},
	{"WAIT", classBlocking},
	{"WAITAOF", classBlocking},
	{"SUBSCRIBE", classHolding},
	{"PSUBSCRIBE", classHolding},
	{"SSUBSCRIBE", classHolding},
	{"MONITOR", classHolding},
}

// TestClassifyNameForms checks that every name is recognised in each form a
// caller of Do can pass it: any ASCII case, and as string, []byte or
// *string.
func TestClassifyNameForms(t *testing.T) {
	for _, tc := range classifyNames {
		lower := strings.ToLower(tc.name)
		mixed := []byte(lower)
		for i := 0; i < len(mixed); i += 2 {
			mixed[i] = tc.name[i]
		}
		forms := []struct {
			form string
			name interface{}
		}{
			{"upper", tc.name},
			{"lower", lower},
			{"mixed", string(mixed)},
			{"bytes-upper", []byte(tc.name)},
			{"bytes-lower", []byte(lower)},
			{"ptr", &lower},
		}
		for _, f := range forms {
			t.Run(tc.name+"/"+f.form, func(t *testing.T) {
				assert.Equal(t, tc.want, classifyArgs([]interface{}{f.name, "k", 0}))
				assert.Equal(t, tc.want, classifyArgs([]interface{}{f.name}), "name alone")
			})
		}
	}
}

func TestClassifyArgs(t *testing.T) {
	var nilStr *string
	block := "block"
	tests := []struct {
		name string
		args []interface{}
		want cmdClass
	}{
		// Ordinary commands, and names that only look like blocking ones.
		{"get", []interface{}{"get", "k"}, classOrdinary},
		{"set value BLOCK", []interface{}{"SET", "k", "BLOCK"}, classOrdinary},
		{"key named blpop", []interface{}{"GET", "BLPOP"}, classOrdinary},
		{"BLPOPS", []interface{}{"BLPOPS", "q", 0}, classOrdinary},
		{"BLPO", []interface{}{"BLPO", "q", 0}, classOrdinary},
		{"bzpopminimum", []interface{}{"bzpopminimum", "z", 0}, classOrdinary},
		{"XREADX block", []interface{}{"XREADX", "BLOCK", 0, "STREAMS", "s", "0"}, classOrdinary},
		{"WAITX", []interface{}{"WAITX", 1, 0}, classOrdinary},
		{"WAI", []interface{}{"WAI", 1, 0}, classOrdinary},
		{"SUBSCRIBER", []interface{}{"SUBSCRIBER", "ch"}, classOrdinary},
		{"MONITORS", []interface{}{"MONITORS"}, classOrdinary},
		{"LPOP", []interface{}{"LPOP", "q"}, classOrdinary},
		{"LMOVEM", []interface{}{"lmovem", "a", "b", "LEFT", "RIGHT"}, classOrdinary},
		{"name with space", []interface{}{"BLPOP ", "q", 0}, classOrdinary},
		{"name with NUL", []interface{}{"BLPOP\x00", "q", 0}, classOrdinary},
		// Redis compares names with strcasecmp: ASCII only. Unicode
		// folding would map the Kelvin sign to k and the long s to s.
		{"unicode long s", []interface{}{"\u017fubscribe", "ch"}, classOrdinary},
		{"unicode kelvin", []interface{}{"XREAD", "BLOC\u212a", 0, "STREAMS", "s", "0"}, classOrdinary},
		{"longer than any known name", []interface{}{"BRPOPLPUSHX", "a", "b", 0}, classOrdinary},

		// The UNSUBSCRIBE family and RESET only end what a holding command
		// opened.
		{"unsubscribe", []interface{}{"unsubscribe", "ch"}, classOrdinary},
		{"punsubscribe", []interface{}{"PUNSUBSCRIBE"}, classOrdinary},
		{"sunsubscribe", []interface{}{"sunsubscribe", "ch"}, classOrdinary},
		{"reset", []interface{}{"RESET"}, classOrdinary},
		{"publish", []interface{}{"PUBLISH", "ch", "SUBSCRIBE"}, classOrdinary},
		// Only the first argument names the command.
		{"sentinel monitor", []interface{}{"SENTINEL", "MONITOR", "m", "127.0.0.1", 6379, 2}, classOrdinary},
		{"client pause", []interface{}{"CLIENT", "PAUSE", 1000}, classOrdinary},
		{"object encoding blpop", []interface{}{"OBJECT", "ENCODING", "BLPOP"}, classOrdinary},
		// Transaction markers are ordinary on their own.
		{"multi", []interface{}{"multi"}, classOrdinary},
		{"exec", []interface{}{"EXEC"}, classOrdinary},
		{"discard", []interface{}{"discard"}, classOrdinary},

		// XREAD: BLOCK counts only at an option position.
		{"xread block", []interface{}{"XREAD", "BLOCK", 0, "STREAMS", "s", "0"}, classBlocking},
		{"xread block lower", []interface{}{"xread", "block", int64(100), "streams", "s", "$"}, classBlocking},
		{"xread block bytes", []interface{}{[]byte("XREAD"), []byte("BlOcK"), []byte("0"), []byte("STREAMS"), []byte("s"), []byte("0")}, classBlocking},
		{"xread block ptr", []interface{}{"XREAD", &block, 0, "STREAMS", "s", "0"}, classBlocking},
		{"xread count then block", []interface{}{"XREAD", "COUNT", 10, "BLOCK", 0, "STREAMS", "s", "0"}, classBlocking},
		{"xread block then count", []interface{}{"XREAD", "BLOCK", 0, "COUNT", 10, "STREAMS", "s", "0"}, classBlocking},
		{"xread maxcount maxsize block", []interface{}{"xread", "maxcount", 5, "maxsize", 1024, "block", 0, "streams", "s", "0"}, classBlocking},
		{"xread no block", []interface{}{"XREAD", "STREAMS", "s", "0"}, classOrdinary},
		{"xread count no block", []interface{}{"XREAD", "COUNT", 1, "STREAMS", "s", "0"}, classOrdinary},
		{"xread stream named BLOCK", []interface{}{"XREAD", "STREAMS", "BLOCK", "0"}, classOrdinary},
		{"xread count then stream named BLOCK", []interface{}{"XREAD", "COUNT", 1, "STREAMS", "BLOCK", "0"}, classOrdinary},
		{"xread id BLOCK", []interface{}{"XREAD", "STREAMS", "s", "BLOCK"}, classOrdinary},
		{"xread count value BLOCK", []interface{}{"XREAD", "COUNT", "BLOCK", "STREAMS", "s", "0"}, classOrdinary},
		{"xread block as int", []interface{}{"XREAD", 0, "STREAMS", "s", "0"}, classOrdinary},
		// An unknown option is stepped over, so a later BLOCK still counts.
		{"xread unknown option", []interface{}{"XREAD", "FUTUREFLAG", "BLOCK", 0, "STREAMS", "s", "0"}, classBlocking},
		// The timeout is never parsed: BLOCK's presence decides.
		{"xread block no value", []interface{}{"XREAD", "BLOCK"}, classBlocking},
		{"xread block bad value", []interface{}{"XREAD", "BLOCK", "soon", "STREAMS", "s", "0"}, classBlocking},
		{"xread block negative", []interface{}{"XREAD", "BLOCK", -1, "STREAMS", "s", "0"}, classBlocking},
		{"xread block nil value", []interface{}{"XREAD", "BLOCK", nil, "STREAMS", "s", "0"}, classBlocking},
		{"xread alone", []interface{}{"XREAD"}, classOrdinary},
		{"xread count no value", []interface{}{"XREAD", "COUNT"}, classOrdinary},
		{"xread streams last", []interface{}{"XREAD", "STREAMS"}, classOrdinary},
		{"xread nil option", []interface{}{"XREAD", nil, nilStr, "BLOCK", 0, "STREAMS", "s", "0"}, classBlocking},

		// XREADGROUP: GROUP takes two values, which may spell anything.
		{"xreadgroup block", []interface{}{"XREADGROUP", "GROUP", "g", "c", "BLOCK", 0, "STREAMS", "s", ">"}, classBlocking},
		{"xreadgroup all options", []interface{}{"xreadgroup", "group", "g", "c", "count", 1, "maxcount", 2, "maxsize", 3, "block", 0, "noack", "claim", 100, "streams", "s", ">"}, classBlocking},
		{"xreadgroup block after noack and claim", []interface{}{"XREADGROUP", "GROUP", "g", "c", "NOACK", "CLAIM", 5, "BLOCK", 0, "STREAMS", "s", ">"}, classBlocking},
		{"xreadgroup block before group", []interface{}{"XREADGROUP", "BLOCK", 0, "GROUP", "g", "c", "STREAMS", "s", ">"}, classBlocking},
		{"xreadgroup no block", []interface{}{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"}, classOrdinary},
		{"xreadgroup group named BLOCK", []interface{}{"XREADGROUP", "GROUP", "BLOCK", "consumer", "STREAMS", "s", ">"}, classOrdinary},
		{"xreadgroup consumer named BLOCK", []interface{}{"XREADGROUP", "GROUP", "g", "BLOCK", "STREAMS", "s", ">"}, classOrdinary},
		{"xreadgroup consumer named STREAMS then block", []interface{}{"XREADGROUP", "GROUP", "g", "STREAMS", "BLOCK", 0, "STREAMS", "s", ">"}, classBlocking},
		{"xreadgroup claim value BLOCK", []interface{}{"XREADGROUP", "GROUP", "g", "c", "CLAIM", "BLOCK", "STREAMS", "s", ">"}, classOrdinary},
		{"xreadgroup stream named BLOCK", []interface{}{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "BLOCK", ">"}, classOrdinary},
		{"xreadgroup group cut short", []interface{}{"XREADGROUP", "GROUP", "g"}, classOrdinary},
		{"xreadgroup alone", []interface{}{"xreadgroup"}, classOrdinary},

		// TS.READ key timestamp [BLOCK timeout mincount] [MAX_COUNT n].
		{"ts.read block", []interface{}{"TS.READ", "k", "$", "BLOCK", 100, 1}, classBlocking},
		{"ts.read max_count then block", []interface{}{"ts.read", "k", "-", "MAX_COUNT", 10, "block", 0, 1}, classBlocking},
		{"ts.read no block", []interface{}{"TS.READ", "k", "+"}, classOrdinary},
		{"ts.read key and timestamp BLOCK", []interface{}{"TS.READ", "BLOCK", "BLOCK"}, classOrdinary},
		{"ts.read max_count value BLOCK", []interface{}{"TS.READ", "k", "-", "MAX_COUNT", "BLOCK"}, classOrdinary},
		{"ts.read short", []interface{}{"TS.READ", "k"}, classOrdinary},

		// Malformed argument lists never panic and are ordinary.
		{"nil args", nil, classOrdinary},
		{"empty args", []interface{}{}, classOrdinary},
		{"nil name", []interface{}{nil, "k"}, classOrdinary},
		{"nil *string name", []interface{}{nilStr}, classOrdinary},
		{"empty name", []interface{}{""}, classOrdinary},
		{"int name", []interface{}{42, "BLPOP"}, classOrdinary},
		{"duration name", []interface{}{time.Second}, classOrdinary},
		{"bool name", []interface{}{true, "BLOCK"}, classOrdinary},
		{"float name", []interface{}{1.5}, classOrdinary},
		{"empty []byte name", []interface{}{[]byte{}}, classOrdinary},
		{"nil []byte name", []interface{}{[]byte(nil)}, classOrdinary},
		{"stringer name", []interface{}{fmtName("BLPOP"), "q", 0}, classOrdinary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, classifyArgs(tt.args))
			assert.Equal(t, tt.want, classifyCmd(redis.NewCmd(context.Background(), tt.args...)), "as a Cmder")
		})
	}
}

// fmtName is a name type the go-redis encoder cannot write: it is not one
// of the string-like forms, so it must never be taken for a command name.
type fmtName string

func (n fmtName) String() string { return string(n) }

func TestClassifyCmdNil(t *testing.T) {
	assert.Equal(t, classOrdinary, classifyCmd(nil))
	assert.False(t, batchIsBlocking([]redis.Cmder{nil}))
	assert.False(t, isTxBatch([]redis.Cmder{nil, nil}))
}

func TestCmdClassString(t *testing.T) {
	for _, tc := range []struct {
		c    cmdClass
		want string
	}{
		{classOrdinary, "ordinary"},
		{classBlocking, "blocking"},
		{classHolding, "holding"},
		{cmdClass(9), "cmdClass(9)"},
	} {
		t.Run(tc.want, func(t *testing.T) { assert.Equal(t, tc.want, tc.c.String()) })
	}
}

// classifyCapture is a go-redis hook that records what the client would
// send and, unless pass is set, stops there, so the typed commands can be
// examined exactly as the client built them without a server that would
// block on BLPOP.
type classifyCapture struct {
	pass  bool // let single commands through to the server
	cmd   redis.Cmder
	seen  []redis.Cmder // every single command, when pass is set
	batch []redis.Cmder
}

func (h *classifyCapture) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *classifyCapture) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmd = cmd
		if h.pass {
			h.seen = append(h.seen, cmd)
			return next(ctx, cmd)
		}
		return nil
	}
}

func (h *classifyCapture) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		h.batch = cmds
		return nil
	}
}

func newCaptureClient(t *testing.T) (*redis.Client, *classifyCapture) {
	t.Helper()
	srv := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := &classifyCapture{}
	c.AddHook(h)
	return c, h
}

// TestClassifyTypedCommands classifies the Cmders that go-redis's own typed
// methods and Do build, as the process hook receives them.
func TestClassifyTypedCommands(t *testing.T) {
	ctx := context.Background()
	c, h := newCaptureClient(t)
	tests := []struct {
		name string
		run  func() redis.Cmder
		want cmdClass
	}{
		{"Get", func() redis.Cmder { return c.Get(ctx, "k") }, classOrdinary},
		{"Set value block", func() redis.Cmder { return c.Set(ctx, "k", "block", 0) }, classOrdinary},
		{"LPop", func() redis.Cmder { return c.LPop(ctx, "q") }, classOrdinary},
		{"XAdd", func() redis.Cmder {
			return c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"BLOCK", "0"}})
		}, classOrdinary},
		{"Publish", func() redis.Cmder { return c.Publish(ctx, "ch", "subscribe") }, classOrdinary},
		{"BLPop", func() redis.Cmder { return c.BLPop(ctx, 0, "q") }, classBlocking},
		{"BRPop", func() redis.Cmder { return c.BRPop(ctx, time.Second, "a", "b") }, classBlocking},
		{"BRPopLPush", func() redis.Cmder { return c.BRPopLPush(ctx, "a", "b", 0) }, classBlocking},
		{"BLMove", func() redis.Cmder { return c.BLMove(ctx, "a", "b", "LEFT", "RIGHT", 0) }, classBlocking},
		{"BLMoveM", func() redis.Cmder {
			return c.BLMoveM(ctx, "a", "b", "LEFT", "RIGHT", 0, redis.LMoveMArgs{Count: 2})
		}, classBlocking},
		{"BLMPop", func() redis.Cmder { return c.BLMPop(ctx, 0, "left", 1, "a") }, classBlocking},
		{"BZPopMin", func() redis.Cmder { return c.BZPopMin(ctx, 0, "z") }, classBlocking},
		{"BZPopMax", func() redis.Cmder { return c.BZPopMax(ctx, 0, "z") }, classBlocking},
		{"BZMPop", func() redis.Cmder { return c.BZMPop(ctx, 0, "min", 1, "z") }, classBlocking},
		{"Wait", func() redis.Cmder { return c.Wait(ctx, 1, time.Second) }, classBlocking},
		// go-redis spells this one "waitAOF": mixed case from a typed method.
		{"WaitAOF", func() redis.Cmder { return c.WaitAOF(ctx, 1, 0, time.Second) }, classBlocking},
		{"Monitor", func() redis.Cmder { return c.Monitor(ctx, make(chan string)) }, classHolding},

		// XRead emits BLOCK for any Block >= 0; only a negative Block
		// leaves it out. The zero XReadArgs therefore blocks forever.
		{"XRead Block -1", func() redis.Cmder {
			return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"block", "0"}, Block: -1})
		}, classOrdinary},
		{"XRead Block -1 Count", func() redis.Cmder {
			return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}, Count: 5, MaxCount: 9, MaxSize: 99, Block: -1})
		}, classOrdinary},
		{"XReadStreams", func() redis.Cmder { return c.XReadStreams(ctx, "BLOCK", "0") }, classOrdinary},
		{"XRead Block 0", func() redis.Cmder {
			return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}})
		}, classBlocking},
		{"XRead Block 5s Count", func() redis.Cmder {
			return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "$"}, Count: 10, MaxCount: 5, MaxSize: 10, Block: 5 * time.Second})
		}, classBlocking},
		{"XReadGroup Block -1", func() redis.Cmder {
			return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "block", Consumer: "streams", Streams: []string{"s", ">"}, Block: -1})
		}, classOrdinary},
		{"XReadGroup Block -1 all options", func() redis.Cmder {
			return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 1, MaxCount: 2, MaxSize: 3, Block: -1, NoAck: true, Claim: time.Second})
		}, classOrdinary},
		{"XReadGroup Block 0", func() redis.Cmder {
			return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "block", Consumer: "streams", Streams: []string{"s", ">"}})
		}, classBlocking},
		{"XReadGroup Block 1s all options", func() redis.Cmder {
			return c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"s", ">"}, Count: 1, MaxCount: 2, MaxSize: 3, Block: time.Second, NoAck: true, Claim: time.Second})
		}, classBlocking},
		{"TSRead", func() redis.Cmder { return c.TSRead(ctx, "block", redis.TSReadNew) }, classOrdinary},
		{"TSReadWithArgs no block", func() redis.Cmder {
			return c.TSReadWithArgs(ctx, "block", redis.TSReadEarliest, &redis.TSReadOptions{MaxCount: 5})
		}, classOrdinary},
		{"TSReadWithArgs block", func() redis.Cmder {
			return c.TSReadWithArgs(ctx, "k", redis.TSReadNew, &redis.TSReadOptions{Block: true, MaxCount: 5})
		}, classBlocking},

		// Do passes the caller's arguments through unchanged.
		{"Do GET", func() redis.Cmder { return c.Do(ctx, "GET", "k") }, classOrdinary},
		{"Do BLPOP", func() redis.Cmder { return c.Do(ctx, "BLPOP", "q", 0) }, classBlocking},
		{"Do bLmOvE bytes", func() redis.Cmder { return c.Do(ctx, []byte("bLmOvE"), "a", "b", "LEFT", "RIGHT", 0) }, classBlocking},
		{"Do XREAD BLOCK", func() redis.Cmder { return c.Do(ctx, "XREAD", "BLOCK", 0, "STREAMS", "s", "0") }, classBlocking},
		{"Do XREAD stream named BLOCK", func() redis.Cmder { return c.Do(ctx, "XREAD", "STREAMS", "BLOCK", "0") }, classOrdinary},
		{"Do SUBSCRIBE", func() redis.Cmder { return c.Do(ctx, "Subscribe", "ch") }, classHolding},
		{"Do UNSUBSCRIBE", func() redis.Cmder { return c.Do(ctx, "UNSUBSCRIBE", "ch") }, classOrdinary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.cmd = nil
			cmd := tt.run()
			require.Same(t, cmd, h.cmd, "the hook must see the command the method returned")
			assert.Equal(t, tt.want, classifyCmd(cmd), "args %v", cmd.Args())
		})
	}
}

// TestPlainCommand checks which commands, as go-redis's typed methods and
// Do build them, take the node guard's common path (plainCommand), and that
// every name the exact checks single out, in any case, does not.
func TestPlainCommand(t *testing.T) {
	ctx := context.Background()
	c, h := newCaptureClient(t)
	plain := map[string]func() redis.Cmder{
		"Get":     func() redis.Cmder { return c.Get(ctx, "k") },
		"Set":     func() redis.Cmder { return c.Set(ctx, "k", "blpop", 0) },
		"HSet":    func() redis.Cmder { return c.HSet(ctx, "h", "f", "v") },
		"Incr":    func() redis.Cmder { return c.Incr(ctx, "n") },
		"MGet":    func() redis.Cmder { return c.MGet(ctx, "a", "b") },
		"HGetAll": func() redis.Cmder { return c.HGetAll(ctx, "h") },
		"EvalSha": func() redis.Cmder { return c.EvalSha(ctx, "0123", []string{"k"}) },
		"XAdd":    func() redis.Cmder { return c.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"BLOCK", "0"}}) },
		"Publish": func() redis.Cmder { return c.Publish(ctx, "ch", "subscribe") },
		"Do GET":  func() redis.Cmder { return c.Do(ctx, "GET", "k") },
	}
	for name, run := range plain {
		h.cmd = nil
		cmd := run()
		require.Same(t, cmd, h.cmd, name)
		assert.True(t, plainCommand(cmd.Args()), "%s: args %v", name, cmd.Args())
	}
	notPlainCmds := map[string]func() redis.Cmder{
		"BLPop":               func() redis.Cmder { return c.BLPop(ctx, 0, "q") },
		"XRead without BLOCK": func() redis.Cmder { return c.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}, Block: -1}) },
		"Wait":                func() redis.Cmder { return c.Wait(ctx, 1, time.Second) },
		"WaitAOF":             func() redis.Cmder { return c.WaitAOF(ctx, 1, 0, time.Second) },
		"ClusterSlots":        func() redis.Cmder { return c.ClusterSlots(ctx) },
		"ClusterInfo":         func() redis.Cmder { return c.ClusterInfo(ctx) },
		"Select":              func() redis.Cmder { return c.Do(ctx, "select", 1) },
		"ClientID":            func() redis.Cmder { return c.ClientID(ctx) },
		"ReadOnly":            func() redis.Cmder { return c.ReadOnly(ctx) },
		"Do bytes name":       func() redis.Cmder { return c.Do(ctx, []byte("GET"), "k") },
		"Do no name":          func() redis.Cmder { return c.Do(ctx) },
	}
	for name, run := range notPlainCmds {
		cmd := run()
		assert.False(t, plainCommand(cmd.Args()), "%s: args %v", name, cmd.Args())
	}
	var names []string
	names = append(names, handshakeNames...)
	for _, ks := range commandsByLen {
		for _, k := range ks {
			names = append(names, k.name)
		}
	}
	for _, name := range names {
		for _, form := range []string{name, strings.ToLower(name), asciiCase(name, true)} {
			args := []interface{}{form, "x", "0"}
			cmd := redis.NewCmd(ctx, args...)
			special := namedLikeHandshake(cmd) || classifyArgs([]interface{}{form, "k", "0", "BLOCK", "0", "STREAMS", "s", "0"}) != classOrdinary
			switch strings.ToUpper(name) {
			case "MULTI", "EXEC", "DISCARD": // ordinary as single commands
				assert.False(t, special, form)
				assert.True(t, plainCommand(args), form)
			default:
				assert.True(t, special, form)
				assert.False(t, plainCommand(args), form)
			}
		}
	}
}

// teeConn copies everything the client writes, so a test can read the
// commands go-redis put on the wire.
type teeConn struct {
	net.Conn
	mu  *sync.Mutex
	out *bytes.Buffer
}

func (c teeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// readWireCommands parses the RESP arrays of bulk strings a client sends.
func readWireCommands(t *testing.T, wire []byte) [][]interface{} {
	t.Helper()
	r := bufio.NewReader(bytes.NewReader(wire))
	line := func() string {
		s, err := r.ReadString('\n')
		require.NoError(t, err)
		return strings.TrimSuffix(s, "\r\n")
	}
	var cmds [][]interface{}
	for {
		if _, err := r.Peek(1); err == io.EOF {
			return cmds
		}
		head := line()
		require.True(t, strings.HasPrefix(head, "*"), "array header %q", head)
		n, err := strconv.Atoi(head[1:])
		require.NoError(t, err)
		args := make([]interface{}, n)
		for i := range args {
			bulk := line()
			require.True(t, strings.HasPrefix(bulk, "$"), "bulk header %q", bulk)
			size, err := strconv.Atoi(bulk[1:])
			require.NoError(t, err)
			b := make([]byte, size+2)
			_, err = io.ReadFull(r, b)
			require.NoError(t, err)
			args[i] = string(b[:size])
		}
		cmds = append(cmds, args)
	}
}

// TestClassifySubscribeWire classifies SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE
// and UNSUBSCRIBE as go-redis's PubSub writes them. PubSub writes straight
// to its connection and bypasses the process hooks, so the commands are
// read off the wire instead.
func TestClassifySubscribeWire(t *testing.T) {
	ctx := context.Background()
	srv := miniredis.RunT(t)
	var mu sync.Mutex
	var wire bytes.Buffer
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return teeConn{Conn: conn, mu: &mu, out: &wire}, nil
		},
	})
	defer c.Close()
	h := &classifyCapture{pass: true}
	c.AddHook(h)

	ps := c.Subscribe(ctx, "news")
	defer ps.Close()
	_, err := ps.Receive(ctx) // the subscription confirmation
	require.NoError(t, err)
	require.NoError(t, ps.PSubscribe(ctx, "n*"))
	// miniredis has no SSUBSCRIBE; its error reply does not matter, only
	// what the client wrote.
	_ = ps.SSubscribe(ctx, "shard")
	require.NoError(t, ps.Unsubscribe(ctx, "news"))
	// The facade cannot rely on its process hook to see a subscription.
	for _, cmd := range h.seen {
		assert.Equal(t, classOrdinary, classifyCmd(cmd), "the process hook saw %v", cmd.Args())
	}

	mu.Lock()
	sent := readWireCommands(t, wire.Bytes())
	mu.Unlock()
	want := map[string]cmdClass{
		"subscribe":   classHolding,
		"psubscribe":  classHolding,
		"ssubscribe":  classHolding,
		"unsubscribe": classOrdinary,
	}
	seen := map[string]bool{}
	for _, args := range sent {
		name := args[0].(string)
		w, ok := want[name]
		if !ok {
			continue // connection set-up: HELLO, CLIENT SETINFO...
		}
		seen[name] = true
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, w, classifyArgs(args), "args %v", args)
		})
	}
	for name := range want {
		assert.True(t, seen[name], "go-redis did not send %s", name)
	}
}

// TestBatchIsBlocking classifies pipelines as go-redis's Pipelined and
// TxPipelined hand them to the pipeline hook.
func TestBatchIsBlocking(t *testing.T) {
	ctx := context.Background()
	c, h := newCaptureClient(t)
	tests := []struct {
		name   string
		tx     bool
		queue  func(p redis.Pipeliner)
		wantTx bool
		want   bool
	}{
		{"ordinary", false, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
			p.Set(ctx, "b", "BLOCK", 0)
			p.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}, Block: -1})
		}, false, false},
		{"one blocking", false, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
			p.BLPop(ctx, 0, "q")
			p.Get(ctx, "b")
		}, false, true},
		{"blocking last", false, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
			p.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}})
		}, false, true},
		// Names that are not plain send the batch to the full scan, which
		// finds nothing that blocks.
		{"handshake name", false, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
			p.Do(ctx, "select", 0)
			p.Do(ctx, []byte("GET"), "b")
		}, false, false},
		{"raw blocking", false, func(p redis.Pipeliner) {
			p.Do(ctx, "bzpopmin", "z", 0)
		}, false, true},
		{"holding", false, func(p redis.Pipeliner) {
			p.Do(ctx, "SUBSCRIBE", "ch")
		}, false, true},
		// Inside MULTI Redis runs a blocking command without blocking.
		{"tx ordinary", true, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
		}, true, false},
		{"tx of blocking", true, func(p redis.Pipeliner) {
			p.BLPop(ctx, 0, "q")
			p.XRead(ctx, &redis.XReadArgs{Streams: []string{"s", "0"}})
			p.Do(ctx, "WAIT", 1, 0)
		}, true, false},
		// SUBSCRIBE is allowed in MULTI and still opens the push stream.
		{"tx with holding", true, func(p redis.Pipeliner) {
			p.Get(ctx, "a")
			p.Do(ctx, "subscribe", "ch")
		}, true, true},
		// A raw pipeline that closes its own transaction and then blocks.
		{"blocking after raw exec", false, func(p redis.Pipeliner) {
			p.Do(ctx, "MULTI")
			p.BLPop(ctx, 0, "q")
			p.Do(ctx, "EXEC")
			p.BLPop(ctx, 0, "q")
		}, false, true},
		{"blocking after raw discard", false, func(p redis.Pipeliner) {
			p.Do(ctx, "multi")
			p.Get(ctx, "a")
			p.Do(ctx, "discard")
			p.BRPop(ctx, 0, "q")
		}, false, true},
		{"raw transaction of blocking", false, func(p redis.Pipeliner) {
			p.Do(ctx, []byte("MULTI"))
			p.BLPop(ctx, 0, "q")
			p.Do(ctx, "exec")
		}, true, false},
		{"blocking before raw multi", false, func(p redis.Pipeliner) {
			p.BLPop(ctx, 0, "q")
			p.Do(ctx, "MULTI")
			p.Get(ctx, "a")
			p.Do(ctx, "EXEC")
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.batch = nil
			var err error
			if tt.tx {
				_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error { tt.queue(p); return nil })
			} else {
				_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error { tt.queue(p); return nil })
			}
			require.NoError(t, err)
			require.NotEmpty(t, h.batch)
			assert.Equal(t, tt.wantTx, isTxBatch(h.batch), "isTxBatch")
			assert.Equal(t, tt.want, batchIsBlocking(h.batch), "batchIsBlocking")
		})
	}
}

func TestIsTxBatch(t *testing.T) {
	ctx := context.Background()
	cmd := func(args ...interface{}) redis.Cmder { return redis.NewCmd(ctx, args...) }
	tests := []struct {
		name string
		cmds []redis.Cmder
		want bool
	}{
		{"nil", nil, false},
		{"multi alone", []redis.Cmder{cmd("multi")}, false},
		{"multi exec", []redis.Cmder{cmd("multi"), cmd("exec")}, true},
		{"upper case", []redis.Cmder{cmd("MULTI"), cmd("GET", "k"), cmd("EXEC")}, true},
		{"no exec", []redis.Cmder{cmd("multi"), cmd("get", "k")}, false},
		{"no multi", []redis.Cmder{cmd("get", "k"), cmd("exec")}, false},
		{"discard at end", []redis.Cmder{cmd("multi"), cmd("get", "k"), cmd("discard")}, false},
		{"exec first", []redis.Cmder{cmd("exec"), cmd("multi")}, false},
		{"empty cmds", []redis.Cmder{cmd(), cmd()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, isTxBatch(tt.cmds))
		})
	}
}

// classifyAllocCases are the hot-path inputs that must allocate nothing.
func classifyAllocCases() map[string][]interface{} {
	name := "blpop"
	return map[string][]interface{}{
		"get":              {"get", "k"},
		"GET bytes":        {[]byte("GET"), []byte("k")},
		"hgetall":          {"hgetall", "h"},
		"lpop near miss":   {"lpush", "q", "v"},
		"blpop":            {"blpop", "q", int64(0)},
		"BLPOP bytes":      {[]byte("BLPOP"), "q", int64(0)},
		"blpop ptr":        {&name, "q", int64(0)},
		"subscribe":        {"subscribe", "ch"},
		"xread block":      {"xread", "count", int64(10), "block", int64(0), "streams", "s", "0"},
		"xread no block":   {"xread", "count", int64(10), "streams", "s", "0"},
		"xreadgroup block": {"xreadgroup", "group", "g", "c", "count", int64(1), "block", int64(0), "noack", "streams", "s", ">"},
		"ts.read block":    {"TS.READ", "k", "$", "BLOCK", int64(0), 1},
		"int name":         {42},
		// What repeatableArgs looks past the name for.
		"set nx bytes":   {"set", "k", "v", []byte("nx")},
		"cluster slots":  {"cluster", "slots"},
		"lmove bytes":    {"lmove", []byte("a"), "b", "left", "right"},
		"msetex":         {"msetex", 1, "k", "v", "xx", "ex", int64(10)},
		"expire text":    {"EXPIRE", "k", "10", "XX"},
		"hsetex":         {"hsetex", "h", "fnx", "FIELDS", 1, "f", "v"},
		"unknown module": {"TS.INCRBY", "ts", 1},
	}
}

func classifyPipeline(n int) []redis.Cmder {
	ctx := context.Background()
	cmds := make([]redis.Cmder, n)
	for i := range cmds {
		cmds[i] = redis.NewStringCmd(ctx, "get", "key:"+strconv.Itoa(i))
	}
	return cmds
}

func TestClassifyAllocs(t *testing.T) {
	for name, args := range classifyAllocCases() {
		t.Run(name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() { _ = classifyArgs(args) })
			assert.Zero(t, allocs)
			allocs = testing.AllocsPerRun(100, func() { _ = repeatableArgs(args) })
			assert.Zero(t, allocs, "repeatable")
		})
	}
	t.Run("pipeline of 100", func(t *testing.T) {
		cmds := classifyPipeline(100)
		allocs := testing.AllocsPerRun(100, func() { _ = batchIsBlocking(cmds) })
		assert.Zero(t, allocs)
	})
	t.Run("transaction of 100", func(t *testing.T) {
		cmds := append([]redis.Cmder{redis.NewStatusCmd(context.Background(), "multi")}, classifyPipeline(98)...)
		cmds = append(cmds, redis.NewSliceCmd(context.Background(), "exec"))
		allocs := testing.AllocsPerRun(100, func() { _ = isTxBatch(cmds) && batchIsBlocking(cmds) })
		assert.Zero(t, allocs)
	})
}

var (
	classifySink   cmdClass
	repeatableSink bool
)

func BenchmarkClassify(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		args []interface{}
	}{
		{"get", redis.NewStringCmd(ctx, "get", "key").Args()},
		{"blpop", redis.NewStringSliceCmd(ctx, "blpop", "q", int64(0)).Args()},
		{"xread-block", []interface{}{"xread", "count", int64(10), "block", int64(0), "streams", "s", "0"}},
		{"xreadgroup-block", []interface{}{"xreadgroup", "group", "g", "c", "count", int64(1), "block", int64(0), "streams", "s", ">"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				classifySink = classifyArgs(bc.args)
			}
		})
	}
	for _, bc := range []struct {
		name string
		args []interface{}
	}{
		{"repeatable-get", redis.NewStringCmd(ctx, "get", "key").Args()},
		{"repeatable-set-nx", redis.NewStatusCmd(ctx, "set", "key", "v", "px", int64(100), "nx").Args()},
		{"repeatable-cluster-slots", redis.NewClusterSlotsCmd(ctx, "cluster", "slots").Args()},
		{"repeatable-unknown", []interface{}{"TS.INCRBY", "ts", 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				repeatableSink = repeatableArgs(bc.args)
			}
		})
	}
	b.Run("pipeline-100", func(b *testing.B) {
		cmds := classifyPipeline(100)
		b.ReportAllocs()
		var blocking bool
		for b.Loop() {
			blocking = batchIsBlocking(cmds)
		}
		if blocking {
			b.Fatal("an ordinary pipeline classified as blocking")
		}
	})
}

// FuzzClassify builds argument lists from a space-separated line. types
// gives each argument's Go type, two bits per argument: string, []byte,
// *string, or a non-string value (an int when the text is a number, nil
// otherwise), which is how the encoder's non-keyword types reach us.
func FuzzClassify(f *testing.F) {
	f.Fuzz(func(t *testing.T, line []byte, types uint64) {
		args := fuzzClassifyArgs(line, types)
		got := classifyArgs(args)

		require.Equal(t, refClassify(args), got, "args %#v", args)

		if len(args) == 0 {
			return
		}
		name, isName := refWord(args[0])
		if isName {
			// The name matches in any ASCII case and any string form.
			for _, alt := range []interface{}{asciiCase(name, false), asciiCase(name, true), []byte(asciiCase(name, false))} {
				variant := append([]interface{}{alt}, args[1:]...)
				require.Equal(t, got, classifyArgs(variant), "name %q", alt)
			}
		}
		switch name {
		case "XREAD", "XREADGROUP", "TS.READ":
		default:
			// Only these three look past the name.
			require.Equal(t, classifyArgs(args[:1]), got, "args %#v", args)
		}

		// Repeatability: never for a name the table lacks, and the same
		// answer whatever the name's case and string form.
		again := repeatableArgs(args)
		if again {
			_, byName := repeatableNames[name]
			sub := ""
			if len(args) > 1 {
				sub, _ = refWord(args[1])
			}
			_, bySub := repeatableNames[name+"|"+sub]
			require.True(t, byName || bySub, "args %#v repeatable, but not listed", args)
		}
		if isName {
			for _, alt := range []interface{}{asciiCase(name, false), []byte(name)} {
				variant := append([]interface{}{alt}, args[1:]...)
				require.Equal(t, again, repeatableArgs(variant), "name %q", alt)
			}
		}

		cmd := redis.NewCmd(context.Background(), args...)
		require.Equal(t, got, classifyCmd(cmd))
		if plainCommand(args) {
			// The node guard's one look is never wrong the other way.
			require.Equal(t, classOrdinary, got, "args %#v", args)
			require.False(t, namedLikeHandshake(cmd), "args %#v", args)
			require.False(t, isClusterSlots(cmd), "args %#v", args)
		}
		require.Equal(t, again, repeatable(cmd))
		require.Equal(t, got != classOrdinary, batchIsBlocking([]redis.Cmder{cmd}))
		tx := []redis.Cmder{redis.NewCmd(context.Background(), "multi"), cmd, redis.NewCmd(context.Background(), "exec")}
		require.True(t, isTxBatch(tx))
		require.Equal(t, got == classHolding, batchIsBlocking(tx))
	})
}

func fuzzClassifyArgs(line []byte, types uint64) []interface{} {
	if len(line) == 0 {
		return nil
	}
	fields := bytes.Split(line, []byte(" "))
	args := make([]interface{}, len(fields))
	for i, field := range fields {
		switch (types >> (2 * (i % 32))) & 3 {
		case 0:
			args[i] = string(field)
		case 1:
			args[i] = bytes.Clone(field)
		case 2:
			s := string(field)
			args[i] = &s
		case 3:
			if n, err := strconv.ParseInt(string(field), 10, 64); err == nil {
				args[i] = n
			} else {
				args[i] = nil
			}
		}
	}
	return args
}

// refClassify is the reference the fuzz target checks classifyArgs
// against: deliberately naive (maps, upper-cased copies, a position
// counter) and sharing no code with classify.go.
func refClassify(args []interface{}) cmdClass {
	words := make([]string, len(args))
	isWord := make([]bool, len(args))
	for i, a := range args {
		words[i], isWord[i] = refWord(a)
	}
	if len(args) == 0 || !isWord[0] {
		return classOrdinary
	}
	blockingNames := map[string]bool{
		"BLPOP": true, "BRPOP": true, "BRPOPLPUSH": true, "BLMOVE": true, "BLMOVEM": true,
		"BLMPOP": true, "BZPOPMIN": true, "BZPOPMAX": true, "BZMPOP": true,
		"WAIT": true, "WAITAOF": true,
	}
	holdingNames := map[string]bool{"SUBSCRIBE": true, "PSUBSCRIBE": true, "SSUBSCRIBE": true, "MONITOR": true}
	switch {
	case blockingNames[words[0]]:
		return classBlocking
	case holdingNames[words[0]]:
		return classHolding
	case words[0] == "XREAD" || words[0] == "XREADGROUP":
		// Option words and how many values follow each; STREAMS ends them.
		arity := map[string]int{"COUNT": 1, "BLOCK": 1, "GROUP": 2, "CLAIM": 1, "MAXCOUNT": 1, "MAXSIZE": 1}
		for pos := 1; pos < len(args); {
			if isWord[pos] && words[pos] == "STREAMS" {
				break
			}
			if isWord[pos] && words[pos] == "BLOCK" {
				return classBlocking
			}
			if isWord[pos] {
				pos += 1 + arity[words[pos]]
			} else {
				pos++
			}
		}
	case words[0] == "TS.READ":
		for pos := 3; pos < len(args); pos++ {
			if !isWord[pos] {
				continue
			}
			if words[pos] == "BLOCK" {
				return classBlocking
			}
			if words[pos] == "MAX_COUNT" {
				pos++
			}
		}
	}
	return classOrdinary
}

// refWord returns the upper-cased text of a string-like argument. Upper
// casing is ASCII only, as in Redis's strcasecmp.
func refWord(arg interface{}) (string, bool) {
	switch v := arg.(type) {
	case string:
		return asciiCase(v, true), true
	case []byte:
		return asciiCase(string(v), true), true
	case *string:
		if v == nil {
			return "", false
		}
		return asciiCase(*v, true), true
	}
	return "", false
}

func asciiCase(s string, upper bool) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - 32
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}

// TestFuzzClassifyArgsTypes checks that the fuzz argument builder really
// produces every type, so the fuzz target reaches each branch of
// classifyArgs.
func TestFuzzClassifyArgsTypes(t *testing.T) {
	args := fuzzClassifyArgs([]byte("XREAD BLOCK 0 STREAMS x"), 0b11_10_11_01_00)
	assert.Equal(t, "XREAD", args[0])
	assert.Equal(t, []byte("BLOCK"), args[1])
	assert.Equal(t, int64(0), args[2])
	assert.Equal(t, "STREAMS", *(args[3].(*string)))
	assert.Nil(t, args[4])
	assert.Equal(t, classBlocking, classifyArgs(args))
}

// captureHook keeps the last command a client was asked to run and sends
// nothing.
type captureHook struct{ cmd redis.Cmder }

func (h *captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *captureHook) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error { h.cmd = cmd; return nil }
}
func (h *captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
