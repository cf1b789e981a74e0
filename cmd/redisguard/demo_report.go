package main

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redisguard/redisguard"
)

// failFastLimit is the latency below which a failed call counts as having
// failed fast: the caller got its answer and moved on.
const failFastLimit = 10 * time.Millisecond

// timeline is when the phases begin and end, relative to the start.
type timeline struct {
	faultAt, healAt, end time.Duration
}

func (tl timeline) phase(at time.Duration, fault string) string {
	switch {
	case at < tl.faultAt:
		return "healthy"
	case at < tl.healAt:
		return fault
	}
	return "recovered"
}

// Table layout: the time and phase, then four columns per side.
const (
	tableHeadFmt = "%6s  %-14s |%37s |%37s\n"
	tableRowFmt  = "%6s  %-14s |%8s %8s %9s %9s |%8s %8s %9s %9s\n"
)

func printTableHeader(w io.Writer) {
	fmt.Fprintf(w, tableHeadFmt, "", "", center("go-redis alone", 37), center("redisguard", 37))
	fmt.Fprintf(w, tableRowFmt, "time", "phase", "ok/s", "fail/s", "p99", "stuck", "ok/s", "fail/s", "p99", "stuck")
	fmt.Fprintln(w, strings.Repeat("-", 6+2+14+2+37+2+37))
}

func center(s string, width int) string {
	pad := max(width-len(s), 0)
	return strings.Repeat(" ", pad-pad/2) + s + strings.Repeat(" ", pad/2)
}

// printRow prints second s (1-based: the second that ended at s), as seen
// at now.
func printRow(w io.Writer, s int, phase string, now time.Time, recs [2]*recorder) {
	cols := []any{strconv.Itoa(s) + "s", phase}
	from, to := time.Duration(s-1)*time.Second, time.Duration(s)*time.Second
	for _, r := range recs {
		ok, failed, p99, stuck := r.window(from, to, now)
		cols = append(cols, strconv.Itoa(ok), strconv.Itoa(failed), fmtLat(p99), strconv.FormatFloat(stuck, 'f', 1, 64))
	}
	fmt.Fprintf(w, tableRowFmt, cols...)
}

// printEvent prints one of redisguard's events between the rows, as the
// demo's OnEvent saw it.
func printEvent(w io.Writer, start time.Time, e redisguard.Event) {
	what := map[redisguard.EventKind]string{
		redisguard.EventBreakerOpened:   "breaker opened: calls for the node now fail fast",
		redisguard.EventBreakerHalfOpen: "breaker half-open: a recovery probe was answered, traffic goes through",
		redisguard.EventBreakerClosed:   "breaker closed: the node serves again",
		redisguard.EventPoolExhausted:   "pool exhausted",
		redisguard.EventRefreshFailed:   "slot map refresh failed",
	}[e.Kind]
	if what == "" {
		return
	}
	at := e.Time.Sub(start).Seconds()
	fmt.Fprintf(w, "%6s  %-14s   redisguard event: %s (%s)\n", "", fmt.Sprintf("%.2fs", at), what, e.Addr)
}

// fmtLat renders a latency for the table: short, with a unit that suits it.
func fmtLat(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return strconv.FormatInt(d.Microseconds(), 10) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
}

// summary is what one side's callers went through, in numbers. Served
// means succeeded: a call that failed, fast or not, served no one.
type summary struct {
	baseOK        float64 // calls served/s while healthy (the first second is warm-up)
	baseHealthyOK float64 // of which for keys the fault does not touch
	hangOK        float64 // calls served/s during the fault
	hangHealthyOK float64 // of which for keys the fault does not touch

	stuckFor time.Duration // how long at least half the callers were stuck
	longest  time.Duration // the longest call

	failsFast     bool          // some call failed fast during the fault
	failFastAfter time.Duration // from the fault to the first call that failed fast
	failFastP99   time.Duration // p99 latency of the failed calls after that
	failFastErr   error         // the error they failed with

	recovered      bool          // a call for the sick keys, made after healing, succeeded
	recoveredAfter time.Duration // from healing to the end of the first such call
}

// summarize turns a side's record into its summary.
func summarize(workers int, tl timeline, ticks []tickStats, calls []call) summary {
	var s summary
	perSec := func(n int, from, to time.Duration) float64 {
		if to <= from {
			return 0
		}
		return float64(n) / (to - from).Seconds()
	}
	warm := min(time.Second, tl.faultAt/2)
	var baseOK, baseHealthy, hangOK, hangHealthy int
	var fastLat []time.Duration
	for _, c := range calls {
		lat := c.lat()
		s.longest = max(s.longest, lat)
		if c.err == nil {
			switch {
			case c.end >= warm && c.end < tl.faultAt:
				baseOK++
				if c.group == groupHealthy {
					baseHealthy++
				}
			case c.end >= tl.faultAt && c.end < tl.healAt:
				hangOK++
				if c.group == groupHealthy {
					hangHealthy++
				}
			}
		}
		if c.err != nil && c.start >= tl.faultAt && c.end < tl.healAt && lat < failFastLimit {
			if !s.failsFast || c.end-tl.faultAt < s.failFastAfter {
				s.failFastAfter = c.end - tl.faultAt
				s.failFastErr = c.err
			}
			s.failsFast = true
		}
		// Calls already in flight when the fault ended say little: a
		// reset connection retried on a fresh one may succeed while the
		// breaker still turns every new call away.
		if c.err == nil && c.group == groupSick && c.start >= tl.healAt {
			if !s.recovered || c.end-tl.healAt < s.recoveredAfter {
				s.recoveredAfter = c.end - tl.healAt
			}
			s.recovered = true
		}
	}
	if s.failsFast {
		for _, c := range calls {
			if c.err != nil && c.start >= tl.faultAt+s.failFastAfter && c.end < tl.healAt {
				fastLat = append(fastLat, c.lat())
			}
		}
		s.failFastP99 = percentile(fastLat, 99)
	}
	s.baseOK = perSec(baseOK, warm, tl.faultAt)
	s.baseHealthyOK = perSec(baseHealthy, warm, tl.faultAt)
	s.hangOK = perSec(hangOK, tl.faultAt, tl.healAt)
	s.hangHealthyOK = perSec(hangHealthy, tl.faultAt, tl.healAt)
	for i, t := range ticks {
		if time.Duration(i)*tick >= tl.faultAt && 2*t.stuckCallers() >= float64(workers) {
			s.stuckFor += tick
		}
	}
	return s
}

// scene is what the verdict says about the run besides the two sides'
// summaries.
type scene struct {
	fault    string   // the fault's name ("server hung")
	sick     string   // the sick node, as the prose names it ("the hung server")
	healthy  string   // the others ("the two healthy servers")
	sickAddr string   // the sick node's address, as events name it
	tl       timeline // as it happened
	events   []redisguard.Event
}

// opened returns redisguard's first breaker opening for the sick node
// during the fault, and how many times breakers of other nodes opened
// from the fault on. Event times are relative to start.
func (sc scene) opened(start time.Time) (first *redisguard.Event, others int) {
	for i, e := range sc.events {
		at := e.Time.Sub(start)
		if e.Kind != redisguard.EventBreakerOpened || at < sc.tl.faultAt {
			continue
		}
		switch {
		case e.Addr != sc.sickAddr:
			others++
		case first == nil && at < sc.tl.healAt:
			first = &sc.events[i]
		}
	}
	return first, others
}

// verdict is the closing paragraph: what each side kept serving while one
// node was sick, why, and how soon the sick node's keys were served again.
func verdict(sc scene, start time.Time, stock, guard summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Verdict: the fault (%s) lasted from %s to %s (%s). ",
		sc.fault, fmtSecs(sc.tl.faultAt), fmtSecs(sc.tl.healAt), fmtSecs(sc.tl.healAt-sc.tl.faultAt))

	fmt.Fprintf(&b, "With go-redis alone, calls served fell from %.0f/s before it to %.0f/s during it, "+
		"and those for %s from %.0f/s to %.0f/s (%s). ",
		stock.baseOK, stock.hangOK, sc.healthy, stock.baseHealthyOK, stock.hangHealthyOK, pct(stock.hangHealthyOK, stock.baseHealthyOK))
	fmt.Fprintf(&b, "Its callers were stuck for %s", fmtSecs(stock.stuckFor))
	if stock.failsFast {
		fmt.Fprintf(&b, " (some calls failed fast after %s)", fmtSecs(stock.failFastAfter))
	} else {
		fmt.Fprintf(&b, ": every call for %s waited out the %s read timeout", sc.sick, fmtSecs(demoTimeout))
		if stock.longest > 3*demoTimeout/2 {
			b.WriteString(", some more than once as go-redis retried")
		}
	}
	fmt.Fprintf(&b, " (longest call %s), and a caller waiting there served no one else. ", fmtLat(stock.longest))

	fmt.Fprintf(&b, "With redisguard, calls served fell from %.0f/s to %.0f/s, and those for %s went from %.0f/s to %.0f/s (%s). ",
		guard.baseOK, guard.hangOK, sc.healthy, guard.baseHealthyOK, guard.hangHealthyOK, pct(guard.hangHealthyOK, guard.baseHealthyOK))
	fmt.Fprintf(&b, "Its callers were stuck for %s", fmtSecs(guard.stuckFor))
	first, others := sc.opened(start)
	switch {
	case first == nil:
		fmt.Fprintf(&b, ": the breaker of %s did not open during the fault", sc.sick)
	case first.Decision == redisguard.DecisionSilent:
		fmt.Fprintf(&b, ": the breaker of %s opened %s into the fault, when the node had left its commands unanswered for %s",
			sc.sick, fmtSecs(first.Time.Sub(start)-sc.tl.faultAt), fmtLat(first.Duration))
	default:
		fmt.Fprintf(&b, ": the breaker of %s opened %s into the fault, after its commands failed %d times in a row",
			sc.sick, fmtSecs(first.Time.Sub(start)-sc.tl.faultAt), redisguard.DefaultNodeFailureThreshold)
	}
	if guard.failsFast {
		fmt.Fprintf(&b, ", and from then on calls for it failed in %s (p99) with %s", fmtLat(guard.failFastP99), errName(guard.failFastErr))
	}
	b.WriteString(". ")
	if others > 0 {
		fmt.Fprintf(&b, "Breakers of %s opened %s too, turning their calls away until a probe was answered. ", sc.healthy, times(others))
	}
	fmt.Fprintf(&b, "After the fault, go-redis served the keys of %s again %s and redisguard %s.",
		sc.sick, recoveryText(stock), recoveryText(guard))
	return b.String()
}

// times says n times in words: "once", "twice", "3 times".
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return strconv.Itoa(n) + " times"
}

func recoveryText(s summary) string {
	if !s.recovered {
		return "not at all before the demo ended"
	}
	return "after " + fmtLat(s.recoveredAfter)
}

// errName names the error callers saw, by its sentinel where it has one.
func errName(err error) string {
	for _, e := range []struct {
		err  error
		name string
	}{
		{redisguard.ErrNodeUnavailable, "ErrNodeUnavailable"},
		{redisguard.ErrPoolExhausted, "ErrPoolExhausted"},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	if err == nil {
		return "an error"
	}
	return strconv.Quote(err.Error())
}

func pct(v, of float64) string {
	if of <= 0 {
		return "n/a"
	}
	return strconv.FormatFloat(100*v/of, 'f', 0, 64) + "%"
}

func fmtSecs(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
}

// wrap breaks text into lines of at most width columns.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(text) {
		n := len([]rune(word))
		if i > 0 {
			if line+1+n > width {
				b.WriteString("\n")
				line = 0
			} else {
				b.WriteString(" ")
				line++
			}
		}
		b.WriteString(word)
		line += n
	}
	return b.String()
}

// errorKinds lists every distinct kind of error in calls, most frequent
// first, with its count: what the callers actually saw. Network errors are
// grouped by what happened, not by the local port each connection had.
func errorKinds(calls []call) string {
	counts := map[string]int{}
	for _, c := range calls {
		if c.err != nil {
			counts[errKind(c.err)]++
		}
	}
	type kind struct {
		msg string
		n   int
	}
	var kinds []kind
	for msg, n := range counts {
		kinds = append(kinds, kind{msg, n})
	}
	slices.SortFunc(kinds, func(a, b kind) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.msg, b.msg)
	})
	if len(kinds) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d× %q", k.n, k.msg))
	}
	return strings.Join(parts, ", ")
}

// localAddr matches the local end of a connection in a network error
// ("read tcp 127.0.0.1:43484->127.0.0.1:6379: i/o timeout").
var localAddr = regexp.MustCompile(`(tcp[46]?|unix) [^ ]*->`)

// errKind is err's text with the local end of its connection left out.
func errKind(err error) string {
	return localAddr.ReplaceAllString(err.Error(), "$1 ")
}

// errInterrupted is returned when the demo was stopped by a signal.
var errInterrupted = errors.New("interrupted; every process and connection it started has been closed")
