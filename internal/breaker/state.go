package breaker

import "strconv"

// State is the position of a breaker in its state machine. The zero State is
// Closed, the state every breaker starts in.
type State uint8

const (
	// Closed lets every call through and counts consecutive failures.
	Closed State = iota
	// HalfOpen follows a successful out-of-band probe: every call is let
	// through, the first success closes the breaker and the first failure
	// opens it again.
	HalfOpen
	// Open fails every call fast until Recover is called.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Outcome is the caller's verdict on a call the breaker let through. The
// breaker never looks at errors itself: deciding which errors mean "this node
// is unhealthy" belongs to the caller, which knows the command and its context.
type Outcome uint8

const (
	// Success means the node answered, even if the answer was a Redis error
	// reply: a node that replies is reachable.
	Success Outcome = iota
	// Failure means the node could not be reached: a connection error or a
	// timeout.
	Failure
	// Neutral means the call says nothing about the node's health, for
	// example the caller's own context was cancelled or the pool was
	// exhausted. Any Outcome value other than Success and Failure is treated
	// as Neutral, because counting nothing is the safe mistake.
	Neutral
)

// String returns "success", "failure" or "neutral".
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Neutral:
		return "neutral"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}
