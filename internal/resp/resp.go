// Package resp reads and writes the RESP2 and RESP3 that redisguard sees on
// a subscription's connection: the commands go-redis writes (arrays of blob
// strings), and the replies and pushes Redis sends back.
//
// It frames and reads what redisguard looks at, and no more. Len delimits
// any frame, and Reader reads a connection frame by frame; Command reads a
// command's arguments, and AppendCommand writes a command; Elems reads the
// head of a pub/sub reply, Simple a simple string or error. The readers copy
// nothing: what they return are sub-slices of their input. Malformed input
// is an error, never a panic.
package resp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Type is a frame's first byte, which says what it holds.
type Type byte

// The RESP2 and RESP3 types.
const (
	SimpleString Type = '+'
	SimpleError  Type = '-'
	Integer      Type = ':'
	BlobString   Type = '$'
	Array        Type = '*'
	Null         Type = '_'
	Boolean      Type = '#'
	Double       Type = ','
	BigNumber    Type = '('
	BlobError    Type = '!'
	Verbatim     Type = '='
	Map          Type = '%'
	Set          Type = '~'
	Attribute    Type = '|'
	Push         Type = '>'
)

// ErrMalformed is returned, wrapped with the line at fault, for bytes that
// are not what the call reads: a RESP frame (Len, Reader), a command
// (Command).
var ErrMalformed = errors.New("resp: malformed")

func malformed(line []byte) error {
	if len(line) > 32 {
		line = line[:32]
	}
	return fmt.Errorf("%w: %q", ErrMalformed, line)
}

var crlf = []byte("\r\n")

// line reads the line at b[pos:]: its type, the text after the type byte,
// and where the next line starts; next is -1 if b holds no whole line.
func line(b []byte, pos int) (typ Type, text []byte, next int) {
	end := bytes.Index(b[pos:], crlf)
	if end < 0 {
		return 0, nil, -1
	}
	if end == 0 {
		return 0, nil, pos + 2 // an empty line: no type, malformed
	}
	return Type(b[pos]), b[pos+1 : pos+end], pos + end + 2
}

// length parses a length or count, which may be -1 (a RESP2 null). More
// than 18 digits is malformed: every int64 it could be has 18 or fewer.
func length(b []byte) (int, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	n := 0
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// blob reads the n bytes of a blob at b[pos:] and their CRLF: next is -1
// if b does not hold them yet, -2 if the CRLF is missing.
func blob(b []byte, pos, n int) (data []byte, next int) {
	if len(b)-pos < n+2 {
		return nil, -1
	}
	if b[pos+n] != '\r' || b[pos+n+1] != '\n' {
		return nil, -2
	}
	return b[pos : pos+n : pos+n], pos + n + 2
}

// Len returns the length of the first whole frame in b, RESP2 or RESP3, or
// 0 if b holds only the start of one. Aggregates are counted, not
// recursed into, so nesting costs no stack.
func Len(b []byte) (int, error) {
	pos, want := 0, 1
	for want > 0 {
		if want > len(b)-pos {
			return 0, nil // every frame takes at least one byte
		}
		typ, text, next := line(b, pos)
		if next < 0 {
			return 0, nil
		}
		head := b[pos:max(pos, next-2)]
		pos = next
		want--
		switch typ {
		case SimpleString, SimpleError, Integer, Null, Boolean, Double, BigNumber:
		case BlobString, BlobError, Verbatim:
			n, ok := length(text)
			if !ok || n < -1 {
				return 0, malformed(head)
			}
			if n < 0 {
				continue // null
			}
			_, next := blob(b, pos, n)
			switch next {
			case -1:
				return 0, nil
			case -2:
				return 0, malformed(head)
			}
			pos = next
		case Array, Set, Push, Map, Attribute:
			n, ok := length(text)
			if !ok || n < -1 {
				return 0, malformed(head)
			}
			switch {
			case n < 0: // null
			case typ == Map:
				want += 2 * n
			case typ == Attribute:
				want += 2*n + 1 // the frame the attributes are about follows
			default:
				want += n
			}
		default:
			return 0, malformed(head)
		}
	}
	return pos, nil
}

// Command reads the command at the start of b, an array of blob strings as
// clients write them. It returns the arguments, appended to args[:0], and
// the command's length; 0 and no error if b holds only the start of one.
// Anything else is ErrMalformed.
func Command(b []byte, args [][]byte) (_ [][]byte, n int, err error) {
	args = args[:0]
	typ, text, pos := line(b, 0)
	if pos < 0 {
		return args, 0, nil
	}
	count, ok := length(text)
	if typ != Array || !ok || count < 0 {
		return args, 0, malformed(b[:pos-2])
	}
	for range count {
		start := pos
		typ, text, next := line(b, pos)
		if next < 0 {
			return args, 0, nil
		}
		l, ok := length(text)
		if typ != BlobString || !ok || l < 0 {
			return args, 0, malformed(b[start : next-2])
		}
		arg, next := blob(b, next, l)
		switch next {
		case -1:
			return args, 0, nil
		case -2:
			return args, 0, malformed(b[start:min(len(b), start+32)])
		}
		args = append(args, arg)
		pos = next
	}
	return args, pos, nil
}

// Elems reads the head of f, one whole frame that is an array or a push (a
// pub/sub reply, in RESP2 and in RESP3): its number of elements n, and its
// leading elements that are blob strings or nulls (nil), into dst. k is how
// many it filled, at most len(dst); ok is false if f is not an array or
// push.
func Elems(f []byte, dst [][]byte) (n, k int, ok bool) {
	typ, text, pos := line(f, 0)
	if pos < 0 || (typ != Array && typ != Push) {
		return 0, 0, false
	}
	if n, ok = length(text); !ok || n < 0 {
		return 0, 0, false
	}
	for k < len(dst) && k < n {
		typ, text, next := line(f, pos)
		switch {
		case next < 0:
			return n, k, true
		case typ == Null:
			dst[k] = nil
		case typ == BlobString:
			l, ok := length(text)
			if !ok || l < -1 {
				return n, k, true
			}
			if l < 0 {
				dst[k] = nil
				break
			}
			if dst[k], next = blob(f, next, l); next < 0 {
				return n, k, true
			}
		default:
			return n, k, true
		}
		pos = next
		k++
	}
	return n, k, true
}

// Simple reads f, a frame that is a simple string or a simple error: its
// type and its text. ok is false for any other frame.
func Simple(f []byte) (typ Type, text []byte, ok bool) {
	typ, text, next := line(f, 0)
	if next < 0 || (typ != SimpleString && typ != SimpleError) {
		return 0, nil, false
	}
	return typ, text, true
}

// AppendCommand appends the command name with args to b, as clients write
// it: an array of blob strings.
func AppendCommand(b []byte, name string, args ...string) []byte {
	b = appendHeader(b, Array, 1+len(args))
	b = appendBlob(b, name)
	for _, a := range args {
		b = appendBlob(b, a)
	}
	return b
}

func appendHeader(b []byte, typ Type, n int) []byte {
	b = append(b, byte(typ))
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, crlf...)
}

func appendBlob(b []byte, s string) []byte {
	b = appendHeader(b, BlobString, len(s))
	b = append(b, s...)
	return append(b, crlf...)
}
