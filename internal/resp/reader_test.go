package resp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var frames = []string{
	">3\r\n$10\r\nssubscribe\r\n$1\r\ns\r\n:1\r\n",
	"+PONG\r\n",
	"*3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$300\r\n" + string(bytes.Repeat([]byte("x"), 300)) + "\r\n",
	"-MOVED 3999 127.0.0.1:6381\r\n",
}

func TestReader(t *testing.T) {
	all := ""
	for _, f := range frames {
		all += f
	}
	for _, tt := range []struct {
		name string
		rd   io.Reader
	}{
		{"all at once", bytes.NewReader([]byte(all))},
		{"a byte at a time", iotest.OneByteReader(bytes.NewReader([]byte(all)))},
		{"in halves", iotest.HalfReader(bytes.NewReader([]byte(all)))},
		{"with the last data, an error", iotest.DataErrReader(bytes.NewReader([]byte(all)))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.rd, 64)
			var got []string
			var kept [][]byte
			for {
				f, err := r.Next()
				if err != nil {
					assert.ErrorIs(t, err, io.EOF)
					break
				}
				got = append(got, string(f))
				kept = append(kept, f)
			}
			assert.Equal(t, frames, got)
			for i, f := range kept {
				assert.Equal(t, frames[i], string(f), "a frame kept is not written over")
			}
			_, err := r.Next()
			assert.ErrorIs(t, err, io.EOF, "and from then on")
		})
	}
}

func TestReaderErrors(t *testing.T) {
	t.Run("the start of a frame, then the connection fails", func(t *testing.T) {
		r := NewReader(io.MultiReader(bytes.NewReader([]byte("+OK\r\n$5\r\nhel")), iotest.ErrReader(net.ErrClosed)), 64)
		f, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, "+OK\r\n", string(f))
		_, err = r.Next()
		assert.ErrorIs(t, err, net.ErrClosed)
	})
	t.Run("not RESP", func(t *testing.T) {
		r := NewReader(bytes.NewReader([]byte("+OK\r\nHTTP/1.1 400\r\n+OK\r\n")), 64)
		f, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, "+OK\r\n", string(f))
		_, err = r.Next()
		assert.ErrorIs(t, err, ErrMalformed)
		assert.Contains(t, err.Error(), "HTTP/1.1 400")
		_, err = r.Next()
		assert.ErrorIs(t, err, ErrMalformed, "and from then on")
	})
}

// A frame handed to another goroutine may be read there while the Reader
// reads on (run with -race).
func TestReaderFramesOutliveNext(t *testing.T) {
	pr, pw := io.Pipe()
	go func() {
		for range 200 {
			for _, f := range frames {
				if _, err := pw.Write([]byte(f)); err != nil {
					return
				}
			}
		}
		_ = pw.Close()
	}()
	out := make(chan []byte, 1000)
	done := make(chan error)
	go func() {
		r := NewReader(pr, 512)
		for {
			f, err := r.Next()
			if err != nil {
				close(out)
				done <- err
				return
			}
			out <- f
		}
	}()
	i := 0
	for f := range out {
		require.Equal(t, frames[i%len(frames)], string(f))
		i++
	}
	assert.True(t, errors.Is(<-done, io.EOF))
	assert.Equal(t, 200*len(frames), i)
}

func BenchmarkReader(b *testing.B) {
	var stream []byte
	for range 100 {
		stream = append(stream, frames[2]...)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		r := NewReader(bytes.NewReader(stream), 16<<10)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}
