package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/redistest"
)

// shortDemo is the shortest run that still shows the breaker at work: the
// hang outlasts the first timeouts (two read timeouts, since the standalone
// client retries one) by a second.
var shortDemo = []string{"--healthy", "1s", "--hang", "3s", "--recovered", "2s", "--workers", "10", "--rate", "20"}

// runDemo runs the demo subcommand as main would.
func runDemoCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"demo"}, args...), &out, &errOut)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// stuckFor extracts "callers were stuck for Ns" for both sides from the
// verdict, go-redis first.
func stuckFor(t *testing.T, verdict string) (stock, guard float64) {
	t.Helper()
	m := regexp.MustCompile(`callers were\s+stuck\s+for\s+([0-9.]+)s`).FindAllStringSubmatch(verdict, -1)
	require.Len(t, m, 2, "verdict: %s", verdict)
	stock, _ = strconv.ParseFloat(m[0][1], 64)
	guard, _ = strconv.ParseFloat(m[1][1], 64)
	return stock, guard
}

// healthyServed extracts, for both sides, go-redis first, the share of the
// healthy nodes' calls before the fault that were still served during it.
func healthyServed(t *testing.T, verdict string) (stock, guard float64) {
	t.Helper()
	m := regexp.MustCompile(`those for the two healthy \w+ .*?\(([0-9]+)%\)`).FindAllStringSubmatch(verdict, -1)
	require.Len(t, m, 2, "verdict: %s", verdict)
	stock, _ = strconv.ParseFloat(m[0][1], 64)
	guard, _ = strconv.ParseFloat(m[1][1], 64)
	return stock, guard
}

// okDuring sums a side's ok/s over the table's rows from..to (inclusive).
func okDuring(t *testing.T, rows map[string]row, from, to int, guard bool) (sum int) {
	t.Helper()
	for s := from; s <= to; s++ {
		r := rows[strconv.Itoa(s)+"s"]
		cols := r.stock
		if guard {
			cols = r.guard
		}
		require.Len(t, cols, 4, "row %ds", s)
		n, err := strconv.Atoi(cols[0])
		require.NoError(t, err)
		sum += n
	}
	return sum
}

// row is one line of the table.
type row struct {
	phase        string
	stock, guard []string // ok/s, fail/s, p99, stuck
}

// tableRows returns the table's data rows, keyed by their time column.
func tableRows(out string) map[string]row {
	rows := map[string]row{}
	for line := range strings.SplitSeq(out, "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			continue
		}
		head := strings.Fields(parts[0])
		if len(head) < 2 || !strings.HasSuffix(head[0], "s") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(head[0], "s")); err != nil {
			continue
		}
		rows[head[0]] = row{phase: strings.Join(head[1:], " "), stock: strings.Fields(parts[1]), guard: strings.Fields(parts[2])}
	}
	return rows
}

// flat joins the words of text with single spaces, undoing the wrapping.
func flat(text string) string { return strings.Join(strings.Fields(text), " ") }

// The embedded demo end to end: a table row per second with both sides,
// the events in between, a verdict in which redisguard's callers were
// stuck for less time and kept serving more of the healthy servers' keys,
// and a chart that parses as SVG.
func TestDemoEmbedded(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "chart.svg")
	start := time.Now()
	code, out, _ := runDemoCmd(t, append(shortDemo, "--svg", svg)...)
	require.Equal(t, 0, code)
	assert.Less(t, time.Since(start), 20*time.Second, "a 6s demo took too long")

	assert.Contains(t, out, "3 embedded Redis servers (miniredis)")
	assert.Contains(t, out, "go-redis alone")
	rows := tableRows(out)
	for s, phase := range map[string]string{"1s": "healthy", "2s": "server hung", "4s": "server hung", "5s": "recovered", "6s": "recovered"} {
		require.Contains(t, rows, s, "no row for %s", s)
		assert.Equal(t, phase, rows[s].phase, "phase of %s", s)
		assert.Len(t, rows[s].stock, 4)
		assert.Len(t, rows[s].guard, 4)
	}
	assert.NotContains(t, rows, "7s", "rows past the end")
	assert.NotEqual(t, "0", rows["1s"].stock[0], "go-redis served nothing while healthy")
	assert.NotEqual(t, "0", rows["1s"].guard[0], "redisguard served nothing while healthy")
	// In the last two seconds of the fault redisguard's breaker is open:
	// it serves the healthy servers' keys and fails the hung one's fast,
	// while go-redis's callers wait on the hung server.
	stockOK, guardOK := okDuring(t, rows, 3, 4, false), okDuring(t, rows, 3, 4, true)
	assert.Greater(t, guardOK, 0, "redisguard served nothing while one server of three hung")
	assert.Greater(t, guardOK, stockOK, "go-redis alone served at least as much as redisguard while a server hung")
	assert.NotEqual(t, "0", rows["4s"].guard[1], "redisguard failed nothing while a server hung")
	assert.Contains(t, out, "redisguard event: breaker opened")
	assert.Contains(t, out, "redisguard event: breaker closed")

	i := strings.Index(out, "Verdict:")
	require.GreaterOrEqual(t, i, 0, "no verdict")
	verdict := flat(out[i:])
	stock, guard := stuckFor(t, verdict)
	assert.Greater(t, stock, guard, "redisguard's callers were stuck at least as long as go-redis's")
	stockShare, guardShare := healthyServed(t, verdict)
	assert.Greater(t, guardShare, stockShare, "go-redis alone kept serving as much of the healthy servers' keys")
	assert.Contains(t, verdict, "lasted from 1.")
	assert.Contains(t, verdict, "with ErrNodeUnavailable")
	assert.Contains(t, verdict, "Errors callers saw")
	assert.Contains(t, out, "Chart written to "+svg)

	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	checkSVG(t, data, "server hung")
}

// checkSVG parses a chart and checks that it has what a reader needs.
func checkSVG(t *testing.T, data []byte, fault string) {
	t.Helper()
	var doc struct {
		XMLName   xml.Name `xml:"svg"`
		Title     string   `xml:"title"`
		Width     string   `xml:"width,attr"`
		Polylines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Texts []string `xml:"text"`
		Rects []struct {
			X     string `xml:"x,attr"`
			Width string `xml:"width,attr"`
		} `xml:"rect"`
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	require.NoError(t, dec.Decode(&doc), "not well-formed XML")
	for {
		tok, err := dec.Token()
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
			break
		}
		cd, ok := tok.(xml.CharData)
		assert.True(t, ok && len(bytes.TrimSpace(cd)) == 0, "content after the root element: %v", tok)
	}
	assert.Equal(t, "svg", doc.XMLName.Local)
	assert.Equal(t, "http://www.w3.org/2000/svg", doc.XMLName.Space)
	assert.Contains(t, doc.Title, "go-redis alone vs redisguard")
	assert.NotContains(t, string(data), "NaN")
	assert.NotContains(t, string(data), "Inf")
	// Four lines of calls per second (ok and failed for each side), two
	// of stuck callers.
	require.Len(t, doc.Polylines, 6)
	for _, p := range doc.Polylines {
		assert.GreaterOrEqual(t, len(strings.Fields(p.Points)), 5, "a line with almost no points")
	}
	texts := strings.Join(doc.Texts, "|")
	for _, want := range []string{"go-redis alone", "redisguard", fault, "Calls per second", "calls / s",
		"seconds since start", "calls ok / s", "calls failed / s", "before the fault", "opened", "0", "1", "2"} {
		assert.Contains(t, texts, want)
	}
	// The background and the two shaded fault windows at least.
	assert.GreaterOrEqual(t, len(doc.Rects), 3)
}

func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"help", []string{"-h"}, "Drives the same workload"},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined"},
		{"stray argument", []string{"extra"}, `unexpected argument "extra"`},
		{"phase too short", []string{"--hang", "500ms"}, "at least 1s"},
		{"no workers", []string{"--workers", "0"}, "--workers"},
		{"rate too high", []string{"--rate", "5000"}, "--rate"},
		{"redis-server without cluster", []string{"--redis-server", "/bin/true"}, "only makes sense with --cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDemoCmd(t, tc.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tc.want)
		})
	}
}

// --cluster needs redis-server, and says so plainly without it.
func TestDemoClusterWithoutServer(t *testing.T) {
	code, _, errOut := runDemoCmd(t, append(shortDemo, "--cluster", "--redis-server", "/nonexistent/redis-server", "--svg", "")...)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "redis-server")
}

// The same story against a real cluster: one master paused, the other two
// keep serving through redisguard, and every server is gone afterwards.
func TestDemoCluster(t *testing.T) {
	bin := redistest.Binary(t) // skips without redis-server, fails under REDISGUARD_REQUIRE_SERVER=1
	svg := filepath.Join(t.TempDir(), "cluster.svg")
	code, out, _ := runDemoCmd(t, append(shortDemo, "--cluster", "--redis-server", bin, "--svg", svg)...)
	require.Equal(t, 0, code)
	assert.Contains(t, out, "master paused")
	i := strings.Index(out, "Verdict:")
	require.GreaterOrEqual(t, i, 0)
	stock, guard := stuckFor(t, flat(out[i:]))
	assert.Greater(t, stock, guard)
	stockShare, guardShare := healthyServed(t, flat(out[i:]))
	assert.Greater(t, guardShare, stockShare)
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	checkSVG(t, data, "master paused")
	for _, addr := range clusterAddrs(t, out) {
		assertNothingListens(t, addr)
	}
}

// clusterAddrs finds the node addresses the demo announced.
func clusterAddrs(t *testing.T, out string) []string {
	t.Helper()
	m := regexp.MustCompile(`at\s+\[([0-9.: \n]+)\]`).FindStringSubmatch(out)
	require.NotNil(t, m, "no cluster addresses in the output")
	addrs := strings.Fields(m[1])
	require.Len(t, addrs, 3)
	return addrs
}

func assertNothingListens(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts connections after the demo", addr)
	}
}

// Interrupted in the middle of the fault (as by Ctrl-C, which cancels the
// context), the demo stops its workers, resumes and stops what it started,
// and says it was interrupted. goleak (TestMain) checks the goroutines.
func TestDemoInterrupted(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "embedded"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			o := demoOptions{healthy: time.Second, hang: 10 * time.Second, recovered: time.Second, workers: 5, rate: 20}
			if cluster {
				o.cluster, o.redisServer = true, redistest.Binary(t)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var out, errOut syncBuffer
			done := make(chan error, 1)
			go func() { done <- runDemo(ctx, o, &out, &errOut) }()
			// Cancel two seconds into the run, in the middle of the fault.
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "   2s  ") }, 30*time.Second, 10*time.Millisecond)
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the demo did not stop within 10s of the interrupt")
			}
			assert.ErrorIs(t, err, errInterrupted)
			if cluster {
				for _, addr := range clusterAddrs(t, out.String()) {
					assertNothingListens(t, addr)
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer that the test may read while the demo writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The numbers behind the verdict, on a made-up run in which a third of the
// calls are for the sick node: go-redis's callers each wait 1s per call for
// the whole fault and serve nothing; redisguard's wait 1s once, then fail
// the sick node's calls fast and serve the others'.
func TestSummarize(t *testing.T) {
	tl := timeline{faultAt: 2 * time.Second, healAt: 5 * time.Second, end: 7 * time.Second}
	const workers = 2
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	timeout := errors.New("i/o timeout")
	unavailable := &redisguard.NodeError{Addr: "a:1", Err: redisguard.ErrNodeUnavailable}

	build := func(calls []call) ([]tickStats, []call) {
		r := newRecorder(workers, time.Unix(0, 0))
		for _, c := range calls {
			r.add(r.start.Add(c.start), r.start.Add(c.end), c.group, c.err)
		}
		return r.snapshot()
	}
	var stock, guard []call
	for range workers {
		for i, at := range []float64{0.5, 1.0, 1.5} { // healthy: the sick node's keys, then the others'
			group := []int{groupHealthy, groupSick, groupHealthy}[i]
			stock = append(stock, call{start: sec(at), end: sec(at + 0.001), group: group})
			guard = append(guard, call{start: sec(at), end: sec(at + 0.001), group: group})
		}
		for at := 2.0; at < 5; at++ { // hung: three 1s timeouts each
			stock = append(stock, call{start: sec(at), end: sec(at + 1), err: timeout})
		}
		guard = append(guard, call{start: sec(2), end: sec(3), err: timeout})
		for at := 3.25; at < 5; at += 0.5 {
			guard = append(guard, call{start: sec(at), end: sec(at + 0.00002), err: unavailable})
		}
		for at := 3.5; at < 5; at += 0.5 {
			guard = append(guard, call{start: sec(at), end: sec(at + 0.001), group: groupHealthy})
		}
		stock = append(stock, call{start: sec(5.1), end: sec(5.101)})
		guard = append(guard, call{start: sec(5.6), end: sec(5.601)})
	}

	st, sc := build(stock)
	s := summarize(workers, tl, st, sc)
	assert.InDelta(t, 3*0.9, s.stuckFor.Seconds(), 0.25, "stuck for the whole fault, less the first 100ms of each call")
	assert.False(t, s.failsFast)
	assert.Equal(t, sec(1), s.longest)
	assert.True(t, s.recovered)
	assert.InDelta(t, 0.101, s.recoveredAfter.Seconds(), 0.001)
	assert.InDelta(t, 4.0, s.baseOK, 0.01, "two callers, two calls each in the second before the fault")
	assert.InDelta(t, 2.0, s.baseHealthyOK, 0.01)
	assert.Zero(t, s.hangOK, "failed calls are not served")
	assert.Zero(t, s.hangHealthyOK)

	gt, gc := build(guard)
	g := summarize(workers, tl, gt, gc)
	assert.InDelta(t, 0.9, g.stuckFor.Seconds(), 0.25)
	assert.True(t, g.failsFast)
	assert.InDelta(t, 1.25, g.failFastAfter.Seconds(), 0.01)
	assert.Equal(t, sec(0.00002), g.failFastP99)
	assert.ErrorIs(t, g.failFastErr, redisguard.ErrNodeUnavailable)
	assert.InDelta(t, 0.601, g.recoveredAfter.Seconds(), 0.001)
	assert.InDelta(t, 2.0, g.hangOK, 0.01, "the failed-fast calls are not counted")
	assert.InDelta(t, 2.0, g.hangHealthyOK, 0.01)

	start := time.Unix(0, 0)
	scn := scene{fault: "server hung", sick: "the hung server", healthy: "the two healthy servers", sickAddr: "a:1", tl: tl,
		events: []redisguard.Event{
			{Kind: redisguard.EventBreakerOpened, Time: start.Add(sec(2.4)), Addr: "a:1", Decision: redisguard.DecisionSilent, Duration: sec(0.4)},
			{Kind: redisguard.EventBreakerOpened, Time: start.Add(sec(4)), Addr: "b:1"},
		}}
	v := verdict(scn, start, s, g)
	for _, want := range []string{"lasted from 2.0s to 5.0s (3.0s)",
		"go-redis alone, calls served fell from 4/s before it to 0/s during it, and those for the two healthy servers from 2/s to 0/s (0%)",
		"callers were stuck for 2.", "waited out the 1.0s read timeout",
		"redisguard, calls served fell from 4/s to 2/s, and those for the two healthy servers went from 2/s to 2/s (100%)",
		"callers were stuck for 0.", "opened 0.4s into the fault, when the node had left its commands unanswered for 400.0ms",
		"failed in 20µs (p99) with ErrNodeUnavailable", "Breakers of the two healthy servers opened once too",
		"after 101.0ms", "after 601.0ms"} {
		assert.Contains(t, v, want)
	}

	scn.events = []redisguard.Event{{Kind: redisguard.EventBreakerOpened, Time: start.Add(sec(3)), Addr: "a:1"}}
	v = verdict(scn, start, s, g)
	assert.Contains(t, v, "opened 1.0s into the fault, after its commands failed 5 times in a row")
	assert.NotContains(t, v, "healthy servers opened")
	scn.events = nil
	assert.Contains(t, verdict(scn, start, s, g), "did not open during the fault")
	assert.NotContains(t, v, "more than once", "no call outlasted one timeout")
	s.longest = 2 * time.Second
	assert.Contains(t, verdict(scn, start, s, g), "waited out the 1.0s read timeout, some more than once as go-redis retried")
}

// Breaker labels never print over each other: events a moment apart share
// one label, labels close enough to touch go on different rows, and when
// the rows are full a line goes without one.
func TestPlaceMarks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xs     []float64
		labels []string
		marks  int
		bare   int // marks without a label
	}{
		{"one", []float64{300}, []string{"opened"}, 1, 0},
		{"half-open and closed a millisecond apart", []float64{665, 665.6}, []string{"half-open", "closed"}, 1, 0},
		{"half-open and closed 200ms apart", []float64{665, 678}, []string{"half-open", "closed"}, 2, 0},
		{"far apart", []float64{300, 665, 665.5}, []string{"opened", "half-open", "closed"}, 2, 0},
		{"a flap", []float64{300, 320, 340, 360}, []string{"opened", "half-open", "opened", "half-open"}, 4, 0},
		{"a flap within a few pixels", []float64{300, 305, 310}, []string{"opened", "half-open", "closed"}, 3, 0},
		{"more than the rows hold", []float64{665, 677, 693, 703, 712}, []string{"half-open", "opened", "half-open", "closed", "opened"}, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marks := placeMarks(tc.xs, tc.labels)
			require.Len(t, marks, tc.marks)
			bare := 0
			for i, a := range marks {
				if a.row < 0 {
					bare++
					continue
				}
				assert.Less(t, a.row, labelRows)
				for _, b := range marks[i+1:] {
					if a.row != b.row {
						continue
					}
					apart := math.Abs(a.x-b.x) - (a.width()+b.width())/2
					assert.GreaterOrEqual(t, apart, float64(labelGap), "%q at %.0f and %q at %.0f overlap on row %d", a.label, a.x, b.label, b.x, a.row)
				}
			}
			assert.Equal(t, tc.bare, bare, "marks without a label")
		})
	}
	assert.Equal(t, "half-open, closed", placeMarks([]float64{665, 665.6}, []string{"half-open", "closed"})[0].label)
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  string
	}{
		{"a b c", 10, "a b c"},
		{"aaa bbb ccc", 7, "aaa bbb\nccc"},
		{"toolongword x", 4, "toolongword\nx"},
		{"  spaced   out ", 20, "spaced out"},
	} {
		assert.Equal(t, tc.want, wrap(tc.in, tc.width))
	}
}

func TestNiceStepAndFormatting(t *testing.T) {
	for raw, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.1: 2, 3: 5, 7: 10, 420: 500, 2001: 5000} {
		assert.Equal(t, want, niceStep(raw), "niceStep(%v)", raw)
	}
	assert.Equal(t, "12,500", groupThousands(12500))
	assert.Equal(t, "500", groupThousands(500))
	assert.Equal(t, "1,000,000", groupThousands(1e6))
	for d, want := range map[time.Duration]string{0: "-", 7 * time.Microsecond: "7µs", 1500 * time.Microsecond: "1.5ms", 2100 * time.Millisecond: "2.10s"} {
		assert.Equal(t, want, fmtLat(d))
	}
}

// The chart is well-formed whatever it is given: no calls at all, or one
// client only.
func TestChartEdgeCases(t *testing.T) {
	tl := timeline{faultAt: time.Second, healAt: 2 * time.Second, end: 3 * time.Second}
	for name, ticks := range map[string][]tickStats{
		"empty":  nil,
		"normal": make([]tickStats, 30),
	} {
		t.Run(name, func(t *testing.T) {
			c := chart{title: "t <&> go-redis alone vs redisguard", subtitle: "s", fault: "server hung", tl: tl, workers: 4,
				series: [2]chartSeries{{name: "go-redis alone", color: colorStock, ticks: ticks}, {name: "redisguard", color: colorGuard, ticks: ticks}}}
			var b bytes.Buffer
			require.NoError(t, c.writeSVG(&b))
			var doc struct {
				XMLName xml.Name `xml:"svg"`
			}
			require.NoError(t, xml.Unmarshal(b.Bytes(), &doc), b.String())
			assert.NotContains(t, b.String(), "NaN")
		})
	}
}

// The demo refuses a chart path in a missing directory before it starts.
func TestDemoChecksTheChartPathFirst(t *testing.T) {
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run([]string{"demo", "--svg", "/no/such/dir/demo.svg"}, &stdout, &stderr)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr.String(), "/no/such/dir does not exist")
	assert.Less(t, time.Since(start), time.Second, "the demo ran before the path was checked")
}

// Error kinds are grouped by what happened, not by each connection's local
// port, and every kind is named.
func TestErrorKindsGroupNetworkErrors(t *testing.T) {
	var calls []call
	for _, port := range []string{"40001", "40002", "40003"} {
		calls = append(calls, call{err: errors.New("read tcp 127.0.0.1:" + port + "->127.0.0.1:6379: i/o timeout")})
	}
	calls = append(calls, call{err: errors.New("EOF")})
	assert.Equal(t, `3× "read tcp 127.0.0.1:6379: i/o timeout", 1× "EOF"`, errorKinds(calls))
}
