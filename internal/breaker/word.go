package breaker

// The breaker's word holds, from the low bits up: the state (2 bits), the
// consecutive failure count (30 bits) and the generation (32 bits). A
// generation would have to go through 2^32 transitions while a ticket is out
// for that ticket to be mistaken for a current one.
const (
	stateBits   = 2
	failureBits = 30
	stateMask   = 1<<stateBits - 1
	failureMask = 1<<failureBits - 1
	genShift    = stateBits + failureBits

	// firstGen is not zero so that the zero Ticket, which a disabled
	// breaker hands out, never matches a live generation.
	firstGen uint32 = 1
)

func pack(s State, failures, gen uint32) uint64 {
	return uint64(gen)<<genShift | uint64(failures&failureMask)<<stateBits | uint64(s)&stateMask
}

// closedWord is pack(Closed, 0, gen), cheap enough for Succeeded to inline.
func closedWord(gen uint32) uint64 { return uint64(gen) << genShift }

func stateOf(w uint64) State     { return State(w & stateMask) }
func failuresOf(w uint64) uint32 { return uint32(w>>stateBits) & failureMask }
func genOf(w uint64) uint32      { return uint32(w >> genShift) }

func nextGen(g uint32) uint32 {
	if g++; g == 0 {
		g = firstGen
	}
	return g
}
