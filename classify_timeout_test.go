package redisguard

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// A blocking command's own timeout, read as Redis reads it, in whatever form
// go-redis's typed methods or a caller's Do put it.
func TestBlockingWait(t *testing.T) {
	for _, tc := range []struct {
		args    []interface{}
		wait    time.Duration
		forever bool
	}{
		{[]interface{}{"blpop", "q", int64(2)}, 2 * time.Second, false}, // BLPop formats seconds as int64
		{[]interface{}{"BLPOP", "a", "b", "0.5"}, 500 * time.Millisecond, false},
		{[]interface{}{"blpop", "q", 0}, 0, true},
		{[]interface{}{"blpop", "q", "0"}, 0, true},
		{[]interface{}{"brpop", "q", 1.5}, 1500 * time.Millisecond, false},
		{[]interface{}{"brpoplpush", "a", "b", int64(3)}, 3 * time.Second, false},
		{[]interface{}{"blmove", "a", "b", "left", "right", []byte("4")}, 4 * time.Second, false},
		{[]interface{}{"blmovem", "a", "b", "left", "right", int64(1), "count", 2}, time.Second, false},
		{[]interface{}{"blmpop", int64(2), 1, "a", "left"}, 2 * time.Second, false},
		{[]interface{}{"bzmpop", "0", 1, "z", "min"}, 0, true},
		{[]interface{}{"bzpopmin", "z", int64(1)}, time.Second, false},
		{[]interface{}{"wait", 1, 250}, 250 * time.Millisecond, false},
		{[]interface{}{"waitAOF", 1, 0, 100}, 100 * time.Millisecond, false},
		{[]interface{}{"wait", 1, 0}, 0, true},
		{[]interface{}{"xread", "count", 1, "block", int64(300), "streams", "s", "$"}, 300 * time.Millisecond, false},
		{[]interface{}{"xreadgroup", "group", "g", "block", "block", 700, "streams", "s", ">"}, 700 * time.Millisecond, false}, // a consumer named block
		{[]interface{}{"xread", "block", 0, "streams", "s", "$"}, 0, true},
		{[]interface{}{"xread", "streams", "block", "0"}, 0, false}, // a stream named BLOCK: no wait
		{[]interface{}{"ts.read", "k", "-", "BLOCK", 1000, 1}, time.Second, false},
		{[]interface{}{"blpop", "q", "-1"}, 0, false},   // refused by Redis at once
		{[]interface{}{"blpop", "q", "soon"}, 0, false}, // refused by Redis at once
		{[]interface{}{"blpop", "q", "1e30"}, 0, true},
		{[]interface{}{"blpop"}, 0, false},
		{[]interface{}{"get", "k"}, 0, false},
		{[]interface{}{}, 0, false},
	} {
		wait, forever := blockingWait(tc.args)
		assert.Equal(t, tc.wait, wait, "%v", tc.args)
		assert.Equal(t, tc.forever, forever, "%v", tc.args)
	}
}

// A batch waits for the sum of its blocking commands' timeouts, forever if
// one waits forever; inside MULTI nothing waits.
func TestBatchWait(t *testing.T) {
	ctx := context.Background()
	cmd := func(args ...interface{}) redis.Cmder { return redis.NewCmd(ctx, args...) }
	for _, tc := range []struct {
		name    string
		cmds    []redis.Cmder
		wait    time.Duration
		forever bool
	}{
		{"ordinary", []redis.Cmder{cmd("get", "k"), cmd("set", "k", "v")}, 0, false},
		{"two pops", []redis.Cmder{cmd("blpop", "a", 1), cmd("get", "k"), cmd("brpop", "b", "0.5")}, 1500 * time.Millisecond, false},
		{"one forever", []redis.Cmder{cmd("blpop", "a", 1), cmd("blpop", "b", 0)}, 0, true},
		{"in MULTI", []redis.Cmder{cmd("multi"), cmd("blpop", "a", 0), cmd("exec"), cmd("blpop", "b", 2)}, 2 * time.Second, false},
	} {
		wait, forever := batchWait(tc.cmds)
		assert.Equal(t, tc.wait, wait, tc.name)
		assert.Equal(t, tc.forever, forever, tc.name)
	}
}

// A blocking command sent again after a wait asks for what is left of its
// own timeout, in its own unit, and never for 0, which waits forever.
func TestShortenWait(t *testing.T) {
	for _, tc := range []struct {
		args    []interface{}
		elapsed time.Duration
		want    []interface{}
	}{
		{[]interface{}{"blpop", "q", int64(8)}, 3 * time.Second, []interface{}{"blpop", "q", "5.000"}},
		{[]interface{}{"blpop", "q", "0.5"}, 200 * time.Millisecond, []interface{}{"blpop", "q", "0.300"}},
		{[]interface{}{"blpop", "q", int64(1)}, 2 * time.Second, []interface{}{"blpop", "q", "0.001"}},
		{[]interface{}{"blpop", "q", 0}, time.Second, []interface{}{"blpop", "q", 0}},
		{[]interface{}{"blmpop", int64(2), 1, "a", "left"}, time.Second, []interface{}{"blmpop", "1.000", 1, "a", "left"}},
		{[]interface{}{"xread", "block", int64(300), "streams", "s", "$"}, 100 * time.Millisecond, []interface{}{"xread", "block", "200", "streams", "s", "$"}},
		{[]interface{}{"wait", 1, 250}, time.Second, []interface{}{"wait", 1, "1"}},
		{[]interface{}{"blpop", "q", "soon"}, time.Second, []interface{}{"blpop", "q", "soon"}},
		{[]interface{}{"get", "k"}, time.Second, []interface{}{"get", "k"}},
	} {
		args := append([]interface{}(nil), tc.args...)
		shortenWait(args, tc.elapsed)
		assert.Equal(t, tc.want, args, "%v after %v", tc.args, tc.elapsed)
	}
}
