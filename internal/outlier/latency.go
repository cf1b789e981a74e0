// Package outlier finds the node that is slow beside its peers: a cheap
// per-node latency estimate (Latency) and a detector (Detector) that marks a
// node slow only after it has stayed far above its peers for a while, never
// marks more than a bounded share of the nodes, and lets marks expire after
// a time that grows for a node that keeps being marked.
//
// Nothing here reads a clock: every method takes the time, so tests drive it.
package outlier

import (
	"math"
	"sync/atomic"
	"time"
)

// Latency is a moving average of a node's response times that weighs each
// sample by the time since the one before: an estimate falls or rises toward
// new samples with time constant Decay, however many arrive. So one slow
// answer among a thousand fast ones barely moves it, and a node that turns
// slow, or recovers, is seen within a few Decay. The zero value is ready; it
// is safe for concurrent use and allocates nothing.
type Latency struct {
	bits    atomic.Uint64 // math.Float64bits of the estimate, in ns; 0: no sample yet
	last    atomic.Int64  // unix ns of the last sample
	samples atomic.Uint64 // samples observed
}

// Decay is the time constant of the average.
const Decay = 500 * time.Millisecond

// Observe adds a response time measured at now.
func (l *Latency) Observe(now time.Time, d time.Duration) {
	x := float64(max(d, 1))
	t := now.UnixNano()
	prevT := l.last.Swap(t)
	l.samples.Add(1)
	// The old estimate's weight: Decay/(Decay+dt), which is exp(-dt/Decay)
	// to first order and costs no exponential.
	w := 0.0
	if dt := t - prevT; dt >= 0 && dt < int64(64*Decay) {
		w = float64(Decay) / float64(int64(Decay)+dt)
	}
	for {
		old := l.bits.Load()
		next := x
		if old != 0 {
			next = math.Float64frombits(old)*w + x*(1-w)
		}
		if l.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// Estimate returns the current estimate, when it was last fed and how many
// samples it has had; ok is false before the first sample.
func (l *Latency) Estimate() (d time.Duration, at time.Time, samples uint64, ok bool) {
	b := l.bits.Load()
	if b == 0 {
		return 0, time.Time{}, 0, false
	}
	return time.Duration(math.Float64frombits(b)), time.Unix(0, l.last.Load()), l.samples.Load(), true
}

// Reset makes d, as of now, the estimate: for a node whose mark ends, whose
// old estimate was built on the little traffic a marked node gets. Starting
// from its peers' latency, a straggler answer from before the mark ended
// weighs as little as any other sample.
func (l *Latency) Reset(now time.Time, d time.Duration) {
	l.last.Store(now.UnixNano())
	l.bits.Store(math.Float64bits(float64(max(d, 1))))
}
