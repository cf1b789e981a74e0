package resp

import "io"

// Reader reads whole frames from a connection, one at a time.
type Reader struct {
	rd   io.Reader
	size int
	buf  []byte // read and not yet returned; the next read goes into its array's spare capacity
	err  error  // the last read's error, returned once buf holds no whole frame
}

// NewReader returns a Reader that reads rd size bytes at a time.
func NewReader(rd io.Reader, size int) *Reader {
	return &Reader{rd: rd, size: max(size, 64)}
}

// Next returns the next whole frame. A frame Next returned is never written
// over: it may be kept, and handed to another goroutine. A read's error is
// returned after every whole frame read before it, and from then on; bytes
// that are not RESP are ErrMalformed at once. The start of a frame that a
// read's error cut short is dropped.
func (r *Reader) Next() ([]byte, error) {
	for {
		if len(r.buf) > 0 {
			n, err := Len(r.buf)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				f := r.buf[:n:n]
				r.buf = r.buf[n:]
				return f, nil
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		if cap(r.buf)-len(r.buf) < r.size/4 {
			// A new array: the old one may hold frames still in use.
			b := make([]byte, len(r.buf), 2*len(r.buf)+r.size)
			copy(b, r.buf)
			r.buf = b
		}
		n, err := r.rd.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		r.err = err
	}
}
