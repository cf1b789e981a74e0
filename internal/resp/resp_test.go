package resp

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLen(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		whole    bool // in is one whole frame; otherwise the start of one
	}{
		{"simple", "+OK\r\n", true},
		{"error", "-ERR no\r\n", true},
		{"integer", ":12\r\n", true},
		{"bulk", "$5\r\nhello\r\n", true},
		{"empty bulk", "$0\r\n\r\n", true},
		{"bulk holding CRLF", "$4\r\na\r\nb\r\n", true},
		{"null bulk", "$-1\r\n", true},
		{"null array", "*-1\r\n", true},
		{"empty array", "*0\r\n", true},
		{"message", "*3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$1\r\n1\r\n", true},
		{"nested", "*2\r\n*1\r\n:1\r\n$0\r\n\r\n", true},
		{"push", ">3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$1\r\n1\r\n", true},
		{"map", "%1\r\n+a\r\n:1\r\n", true},
		{"set", "~2\r\n+a\r\n+b\r\n", true},
		{"attribute then reply", "|1\r\n+a\r\n:1\r\n+OK\r\n", true},
		{"resp3 scalars", "*4\r\n_\r\n#t\r\n,1.5\r\n(12\r\n", true},
		{"verbatim", "=7\r\ntxt:abc\r\n", true},
		{"blob error", "!3\r\nERR\r\n", true},
		{"cut in a header", "*3\r\n$8\r", false},
		{"cut in a bulk", "$5\r\nhel", false},
		{"cut before CRLF", "$5\r\nhello", false},
		{"cut in the CRLF", "$5\r\nhello\r", false},
		{"cut in an array", "*2\r\n:1\r\n", false},
		{"a count no bytes can hold yet", "*999999999999999999\r\n:1\r\n", false},
		{"counts that add up past any int", strings.Repeat("%999999999999999999\r\n", 6) + "+x\r\n", false},
		{"empty", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, err := Len([]byte(tt.in))
			require.NoError(t, err)
			if !tt.whole {
				assert.Zero(t, n)
				return
			}
			assert.Equal(t, len(tt.in), n)
			n, err = Len([]byte(tt.in + "+next\r\n"))
			require.NoError(t, err)
			assert.Equal(t, len(tt.in), n, "a frame followed by another")
		})
	}
}

func TestLenMalformed(t *testing.T) {
	for _, bad := range []string{
		"?1\r\n",                    // no such type
		"\r\n",                      // no type
		"$x\r\n",                    // not a length
		"*\r\n",                     // no count
		"$-2\r\n",                   // below null
		"$99999999999999999999\r\n", // longer than any length
		"$3\r\nabcde\r\n",           // the blob does not end where it says
		"*2\r\n+a\r\n?\r\n",         // a bad element
	} {
		_, err := Len([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformed, "%q", bad)
	}
}

func TestCommand(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		args     []string
		rest     string
	}{
		{"one", "*1\r\n$4\r\nping\r\n", []string{"ping"}, ""},
		{"with args", "*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n$0\r\n\r\n", []string{"subscribe", "a", ""}, ""},
		{"an argument holding CRLF", "*2\r\n$9\r\nsubscribe\r\n$3\r\na\r\n\r\n", []string{"subscribe", "a\r\n"}, ""},
		{"followed by another", "*1\r\n$4\r\nping\r\n*1\r\n$4\r\nping\r\n", []string{"ping"}, "*1\r\n$4\r\nping\r\n"},
		{"no arguments at all", "*0\r\n+x", []string{}, "+x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, n, err := Command([]byte(tt.in), nil)
			require.NoError(t, err)
			got := []string{}
			for _, a := range args {
				got = append(got, string(a))
			}
			assert.Equal(t, tt.args, got)
			assert.Equal(t, tt.rest, tt.in[n:])

			// Every cut is the start of a command.
			for i := range len(tt.in) - len(tt.rest) {
				_, n, err := Command([]byte(tt.in[:i]), nil)
				require.NoError(t, err, "cut at %d", i)
				assert.Zero(t, n, "cut at %d", i)
			}
		})
	}
}

func TestCommandMalformed(t *testing.T) {
	for _, bad := range []string{
		"+OK\r\n",                 // not an array
		"\r\n",                    // not anything
		"*-1\r\n",                 // a null array
		"*x\r\n",                  // not a count
		"*1\r\n:1\r\n",            // not a blob
		"*1\r\n$-1\r\n",           // a null blob
		"*1\r\n$1\r\nab\r\n",      // longer than it says
		"*2\r\n$1\r\na\r\n+b\r\n", // a second argument that is not a blob
		"*1\r\n$99999999999999999999\r\n",
	} {
		_, n, err := Command([]byte(bad), nil)
		assert.ErrorIs(t, err, ErrMalformed, "%q", bad)
		assert.Zero(t, n, "%q", bad)
	}
}

func TestAppendCommand(t *testing.T) {
	assert.Equal(t, "*1\r\n$4\r\nping\r\n", string(AppendCommand(nil, "ping")))
	assert.Equal(t, "+x*3\r\n$10\r\nssubscribe\r\n$1\r\na\r\n$0\r\n\r\n",
		string(AppendCommand([]byte("+x"), "ssubscribe", "a", "")))
}

func TestCommandRoundTrip(t *testing.T) {
	for _, args := range [][]string{
		{"ping"},
		{"ssubscribe", "{a}x", "{b}y"},
		{"subscribe", "", "a\r\nb", "*1\r\n$1\r\nx\r\n", strings.Repeat("x", 70000)},
		{""},
	} {
		b := AppendCommand(nil, args[0], args[1:]...)
		got, n, err := Command(b, nil)
		require.NoError(t, err)
		assert.Equal(t, len(b), n)
		require.Len(t, got, len(args))
		for i := range args {
			assert.Equal(t, args[i], string(got[i]))
		}
		l, err := Len(b)
		require.NoError(t, err)
		assert.Equal(t, len(b), l, "a command is a frame")
	}
}

func TestElems(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		dst      int
		n        int
		elems    []string // "<nil>" for a null
		ok       bool
	}{
		{"a confirmation, RESP2", "*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n", 2, 3, []string{"ssubscribe", "s"}, true},
		{"a confirmation, RESP3", ">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n", 2, 3, []string{"ssubscribe", "s"}, true},
		{"stops at what is not a string", "*3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n", 3, 3, []string{"ssubscribe", "s"}, true},
		{"nulls", "*3\r\n$12\r\nsunsubscribe\r\n$-1\r\n_\r\n", 3, 3, []string{"sunsubscribe", "<nil>", "<nil>"}, true},
		{"an empty string is not a null", "*2\r\n$4\r\npong\r\n$0\r\n\r\n", 2, 2, []string{"pong", ""}, true},
		{"fewer than asked for", "*1\r\n$4\r\npong\r\n", 2, 1, []string{"pong"}, true},
		{"none asked for", "*1\r\n$4\r\npong\r\n", 0, 1, nil, true},
		{"empty", "*0\r\n", 2, 0, nil, true},
		{"cut short", "*2\r\n$4\r\npo", 2, 2, nil, true},
		{"a bad element", "*2\r\n$x\r\n", 2, 2, nil, true},
		{"a simple string", "+PONG\r\n", 2, 0, nil, false},
		{"a map", "%1\r\n+a\r\n+b\r\n", 2, 0, nil, false},
		{"a null array", "*-1\r\n", 2, 0, nil, false},
		{"nothing", "", 2, 0, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := make([][]byte, tt.dst)
			n, k, ok := Elems([]byte(tt.in), dst)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.n, n)
			var got []string
			for _, e := range dst[:k] {
				if e == nil {
					got = append(got, "<nil>")
				} else {
					got = append(got, string(e))
				}
			}
			assert.Equal(t, tt.elems, got)
		})
	}
}

func TestSimple(t *testing.T) {
	for _, tt := range []struct {
		in   string
		typ  Type
		text string
		ok   bool
	}{
		{"+PONG\r\n", SimpleString, "PONG", true},
		{"-MOVED 3999 127.0.0.1:6381\r\n", SimpleError, "MOVED 3999 127.0.0.1:6381", true},
		{"+\r\n", SimpleString, "", true},
		{"+PONG", 0, "", false},
		{"$4\r\nPONG\r\n", 0, "", false},
		{"", 0, "", false},
	} {
		typ, text, ok := Simple([]byte(tt.in))
		assert.Equal(t, tt.ok, ok, "%q", tt.in)
		assert.Equal(t, tt.typ, typ, "%q", tt.in)
		assert.Equal(t, tt.text, string(text), "%q", tt.in)
	}
}

// What redisguard reads on every write and every reply allocates nothing.
func TestReadersDoNotAllocate(t *testing.T) {
	cmd := AppendCommand(nil, "ssubscribe", "a", "b", "c")
	reply := []byte(">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n")
	var args [8][]byte
	var head [2][]byte
	allocs := testing.AllocsPerRun(100, func() {
		_, _, _ = Command(cmd, args[:0])
		_, _ = Len(reply)
		_, _, _ = Elems(reply, head[:])
		_, _, _ = Simple(reply)
	})
	assert.Zero(t, allocs)
}

func BenchmarkCommand(b *testing.B) {
	cmd := AppendCommand(nil, "ssubscribe", "{user1000}.following", "{user1001}.following")
	var args [8][]byte
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := Command(cmd, args[:0]); err != nil || n != len(cmd) {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkLen(b *testing.B) {
	msg := []byte(">3\r\n$8\r\nsmessage\r\n$20\r\n{user1000}.following\r\n$64\r\n" + strings.Repeat("x", 64) + "\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if n, err := Len(msg); err != nil || n != len(msg) {
			b.Fatal(n, err)
		}
	}
}

// FuzzRead feeds arbitrary bytes to every reader: none panics, and they
// agree on where a frame ends.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n",
		"*2\r\n$4\r\npong\r\n$0\r\n\r\n",
		">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n",
		"|1\r\n+a\r\n:1\r\n%1\r\n+k\r\n~1\r\n_\r\n",
		"-MOVED 3999 127.0.0.1:6381\r\n",
		"*1\r\n$4\r\nping\r\n*2\r\n$9\r\nsubscribe\r\n$1\r\na\r\n",
		"$5\r\nhel",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := Len(b)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Len: %v", err)
		}
		if n < 0 || n > len(b) || (err != nil && n != 0) {
			t.Fatalf("Len = %d, %v of %d bytes", n, err, len(b))
		}
		if n > 0 {
			if again, err := Len(b[:n]); again != n || err != nil {
				t.Fatalf("Len of the frame alone = %d, %v; want %d", again, err, n)
			}
			for _, cut := range []int{0, n / 2, n - 1} {
				if got, err := Len(b[:cut]); got != 0 || err != nil {
					t.Fatalf("Len of %d of the frame's %d bytes = %d, %v", cut, n, got, err)
				}
			}
		}

		args, cn, err := Command(b, nil)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Command: %v", err)
		}
		if cn > 0 && cn != n {
			t.Fatalf("Command took %d bytes, Len %d", cn, n)
		}
		if cn > 0 && len(args) > 0 {
			strs := make([]string, len(args))
			for i, a := range args {
				strs[i] = string(a)
			}
			again := AppendCommand(nil, strs[0], strs[1:]...)
			if len(again) > cn {
				t.Fatalf("written again, %q is longer than %q", again, b[:cn])
			}
		}

		var head [3][]byte
		if _, k, _ := Elems(b, head[:]); k > len(head) {
			t.Fatalf("Elems filled %d", k)
		}
		_, _, _ = Simple(b)

		// Read one byte at a time, the frames are those Len finds.
		r := NewReader(iotest.OneByteReader(bytes.NewReader(b)), 1)
		rest := b
		for {
			fr, err := r.Next()
			if err != nil {
				break
			}
			want, _ := Len(rest)
			if want == 0 || !bytes.Equal(fr, rest[:want]) {
				t.Fatalf("Next = %q; Len finds %d bytes of %q", fr, want, rest)
			}
			rest = rest[want:]
		}
	})
}

// FuzzCommand writes a command and reads it back.
func FuzzCommand(f *testing.F) {
	f.Add("ssubscribe\x00{a}x\x00{b}y")
	f.Add("ping")
	f.Add("subscribe\x00a\r\nb\x00")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		b := AppendCommand(nil, args[0], args[1:]...)
		got, n, err := Command(b, nil)
		if err != nil || n != len(b) || len(got) != len(args) {
			t.Fatalf("Command(%q) = %d args, %d, %v", b, len(got), n, err)
		}
		for i := range args {
			if string(got[i]) != args[i] {
				t.Fatalf("argument %d: %q, want %q", i, got[i], args[i])
			}
		}
		if l, err := Len(b); l != len(b) || err != nil {
			t.Fatalf("Len(%q) = %d, %v", b, l, err)
		}
	})
}
