package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redisguard/redisguard"
	"github.com/redisguard/redisguard/internal/redisproc"
)

const demoUsage = `usage: redisguard demo [flags]

Drives the same workload through stock go-redis and through redisguard, side
by side, against three Redis nodes holding a third of the keys each, while
one node is healthy, hangs, and recovers; prints a table per second, a
verdict, and an SVG chart.

By default the nodes are three embedded Redis servers (miniredis), each
behind an in-process fault proxy, and each side has one client per server:
nothing but Go is needed. With --cluster they are a real Redis Cluster of
three masters (redis-server must be on PATH, or see --redis-server), each
side has one cluster client, and one master is paused with SIGSTOP.

Flags:
`

// demoOptions are the demo's flags.
type demoOptions struct {
	healthy, hang, recovered time.Duration
	workers, rate            int
	svg                      string
	cluster                  bool
	redisServer              string
}

// demo runs the demo subcommand and returns the exit code.
func demo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, demoUsage)
		fs.PrintDefaults()
	}
	var o demoOptions
	fs.DurationVar(&o.healthy, "healthy", 3*time.Second, "how long every node is healthy before the fault")
	fs.DurationVar(&o.hang, "hang", 6*time.Second, "how long the fault lasts")
	fs.DurationVar(&o.recovered, "recovered", 4*time.Second, "how long the demo goes on after the fault")
	fs.IntVar(&o.workers, "workers", 50, "callers per side; each node's pool has as many connections")
	fs.IntVar(&o.rate, "rate", 50, "calls per second each caller makes while it is not waiting on Redis")
	fs.StringVar(&o.svg, "svg", "demo.svg", `where to write the chart ("" for none)`)
	fs.BoolVar(&o.cluster, "cluster", false, "run against a real 3-master Redis Cluster and pause one master")
	fs.StringVar(&o.redisServer, "redis-server", "", "redis-server binary for --cluster (default: $"+redisproc.EnvServer+", else redis-server on PATH)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if err := o.check(fs); err != nil {
		fmt.Fprintln(stderr, "redisguard demo:", err)
		fmt.Fprintln(stderr, "run 'redisguard demo -h' for usage")
		return exitUsage
	}

	// Ctrl-C ends the demo early but cleanly: workers stop, clients close,
	// a paused master is resumed and every server is stopped. A second
	// Ctrl-C kills at once (the servers die with the process on Linux).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runDemo(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "redisguard demo:", err)
		return 1
	}
	return 0
}

func (o demoOptions) check(fs *flag.FlagSet) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.healthy < time.Second || o.hang < time.Second || o.recovered < time.Second:
		return errors.New("--healthy, --hang and --recovered must each be at least 1s")
	case o.workers < 1 || o.workers > 1000:
		return fmt.Errorf("--workers must be between 1 and 1000, got %d", o.workers)
	case o.rate < 1 || o.rate > 1000:
		return fmt.Errorf("--rate must be between 1 and 1000 calls/s, got %d", o.rate)
	case o.redisServer != "" && !o.cluster:
		return errors.New("--redis-server only makes sense with --cluster")
	}
	if o.svg != "" {
		// Checked before the demo runs, not after its minute of work.
		if st, err := os.Stat(filepath.Dir(o.svg)); err != nil || !st.IsDir() {
			return fmt.Errorf("--svg %s: the directory %s does not exist", o.svg, filepath.Dir(o.svg))
		}
	}
	return nil
}

func runDemo(ctx context.Context, o demoOptions, out, errOut io.Writer) (err error) {
	be, err := startBackend(o, errOut)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, be.close()) }()
	if ctx.Err() != nil {
		return errInterrupted
	}

	// OnEvent must never block a command: hand events to the printer
	// through a buffered channel and drop what does not fit.
	events := make(chan redisguard.Event, 256)
	var dropped atomic.Int64
	onEvent := func(e redisguard.Event) {
		select {
		case events <- e:
		default:
			dropped.Add(1)
		}
	}
	stock, guard, err := be.clients(o.workers, onEvent)
	if err != nil {
		return err
	}
	var closeOnce sync.Once
	var closeErr error
	closeClients := func() error {
		closeOnce.Do(func() { closeErr = errors.Join(stock.close(), guard.close()) })
		return closeErr
	}
	defer func() { err = errors.Join(err, closeClients()) }()

	tl := timeline{faultAt: o.healthy, healAt: o.healthy + o.hang, end: o.healthy + o.hang + o.recovered}
	printHeader(out, o, be, tl)
	printTableHeader(out)

	wl := workload{workers: o.workers, interval: time.Second / time.Duration(o.rate), keys: be.keys()}
	for _, f := range []fleet{stock, guard} {
		warmCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f.warm(warmCtx, o.workers)
		cancel()
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
	}

	start := time.Now()
	recs := [2]*recorder{newRecorder(o.workers, start), newRecorder(o.workers, start)}
	workCtx, stopWork := context.WithCancel(ctx)
	waits := []func(){
		wl.run(workCtx, stock, recs[0], 1),
		wl.run(workCtx, guard, recs[1], 2),
	}
	// stopWorkers ends the workload. Stock go-redis ignores the context
	// while it waits on a socket (ContextTimeoutEnabled is off by default),
	// so calls still hanging are ended by closing the clients; at the end
	// of a normal run the server is healthy and the calls end on their own
	// first, which spares go-redis complaining about connections closed
	// under it.
	stopWorkers := func(grace time.Duration) {
		stopWork()
		done := make(chan struct{})
		go func() {
			for _, wait := range waits {
				wait()
			}
			close(done)
		}()
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
		}
		_ = closeClients()
		<-done
	}

	prog := newProgress(errOut, tl.end)
	evq := &eventQueue{start: start, ch: events}
	faulted, healed := false, false
	// actual is the timeline as it happened: the fault begins and ends on
	// the first tick past its time, later on a loaded machine. The verdict
	// and the chart use it; the table's phases follow the plan.
	actual := tl
	printed := 0
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			prog.clear()
			stopWorkers(0)
			if faulted && !healed {
				err = be.heal()
			}
			return errors.Join(errInterrupted, err)
		case now := <-ticker.C:
			elapsed := now.Sub(start)
			if !faulted && elapsed >= tl.faultAt {
				if err := be.fault(); err != nil {
					stopWorkers(0)
					return err
				}
				faulted, actual.faultAt = true, time.Since(start)
			}
			if faulted && !healed && elapsed >= tl.healAt {
				if err := be.heal(); err != nil {
					stopWorkers(0)
					return err
				}
				healed, actual.healAt = true, time.Since(start)
			}
			// Print second s half a tick after it ended, so calls that
			// finished just before the boundary are in.
			for s := printed + 1; time.Duration(s)*time.Second+tick/2 <= elapsed && time.Duration(s)*time.Second <= tl.end; s++ {
				prog.clear()
				evq.print(out, time.Duration(s)*time.Second)
				printRow(out, s, tl.phase(time.Duration(s)*time.Second-time.Second/2, be.faultName()), now, recs)
				printed = s
			}
			if elapsed >= tl.end+tick {
				prog.clear()
				stopWorkers(2 * demoTimeout)
				evq.print(out, tl.end+time.Hour)
				return report(out, o, be, actual, recs, evq.shown, &dropped)
			}
			prog.show(elapsed, tl.phase(elapsed, be.faultName()))
		}
	}
}

// printHeader says what is about to happen, before the table.
func printHeader(out io.Writer, o demoOptions, be backend, tl timeline) {
	header := fmt.Sprintf("redisguard demo: %s. Both sides, go-redis alone and redisguard, have %d callers "+
		"making %d calls/s each (a GET of a random key), %d connections per node and %s timeouts; every other "+
		"setting is the default. A caller serves one request at a time, so while it waits on a sick node its "+
		"other requests wait too. redisguard opens a node's breaker when the node leaves its commands "+
		"unanswered for %s or fails %d times in a row, fails the node's calls at once while it probes the node "+
		"on connections of its own, and lets them through again at its first answer. At %s: %s (%s). At %s it recovers.",
		be.describe(), o.workers, o.rate, o.workers, fmtSecs(demoTimeout),
		fmtLat(redisguard.DefaultHungNodeAfter), redisguard.DefaultNodeFailureThreshold,
		fmtSecs(tl.faultAt), be.faultName(), be.faultDetail(), fmtSecs(tl.healAt))
	stuck := fmt.Sprintf("ok/s counts calls that succeeded, fail/s calls that failed; \"stuck\" is the average "+
		"number of callers (of %d) inside a Redis call that has taken over %s.", o.workers, fmtLat(stuckAfter))
	fmt.Fprintf(out, "%s\n\n%s\n\n", wrap(header, 100), wrap(stuck, 100))
}

// startBackend starts the embedded servers or the cluster.
func startBackend(o demoOptions, errOut io.Writer) (backend, error) {
	if !o.cluster {
		return startSharded()
	}
	bin := o.redisServer
	if bin == "" {
		var err error
		if bin, err = redisproc.Binary(); err != nil {
			return nil, fmt.Errorf("--cluster needs redis-server (install it, e.g. apt-get install redis-server, or pass --redis-server PATH): %w", err)
		}
	}
	fmt.Fprintln(errOut, "starting a 3-master Redis Cluster...")
	return startCluster(bin)
}

// eventQueue hands redisguard's events to the table in time order: each goes
// just above the row of the second it happened in.
type eventQueue struct {
	start   time.Time
	ch      chan redisguard.Event
	pending *redisguard.Event // taken from ch, belongs to a later row
	shown   []redisguard.Event
}

// print prints the events that happened before until.
func (q *eventQueue) print(out io.Writer, until time.Duration) {
	for {
		if q.pending == nil {
			select {
			case e := <-q.ch:
				q.pending = &e
			default:
				return
			}
		}
		if q.pending.Time.Sub(q.start) >= until {
			return
		}
		printEvent(out, q.start, *q.pending)
		q.shown = append(q.shown, *q.pending)
		q.pending = nil
	}
}

// report prints the verdict and writes the chart.
func report(out io.Writer, o demoOptions, be backend, tl timeline, recs [2]*recorder,
	events []redisguard.Event, dropped *atomic.Int64) error {
	var sums [2]summary
	var series [2]chartSeries
	var errs [2]string
	for i, r := range recs {
		ticks, calls := r.snapshot()
		sums[i] = summarize(o.workers, tl, ticks, calls)
		series[i] = chartSeries{name: []string{"go-redis alone", "redisguard"}[i], color: []string{colorStock, colorGuard}[i], ticks: ticks}
		errs[i] = errorKinds(calls)
	}
	sc := scene{fault: be.faultName(), sick: be.sickNode(), healthy: "the two healthy " + be.nodes(),
		sickAddr: be.sickAddr(), tl: tl, events: events}
	fmt.Fprintf(out, "\n%s\n", wrap(verdict(sc, recs[1].start, sums[0], sums[1]), 100))
	fmt.Fprintf(out, "\n%s\n%s\n", wrap("Errors callers saw with go-redis alone: "+errs[0]+".", 100),
		wrap("With redisguard: "+errs[1]+".", 100))
	if n := dropped.Load(); n > 0 {
		fmt.Fprintf(out, "(%d redisguard events were not shown: the demo's event buffer was full)\n", n)
	}
	if o.svg == "" {
		return nil
	}
	scenario := "One of three Redis servers hangs"
	if o.cluster {
		scenario = "One of three cluster masters hangs"
	}
	c := chart{
		title: scenario + " for " + fmtSecs(tl.healAt-tl.faultAt) + ": go-redis alone vs redisguard",
		subtitle: fmt.Sprintf("%d callers per side, %d calls/s each; %d connections per node and %s timeouts on both sides, all else default",
			o.workers, o.rate, o.workers, fmtSecs(demoTimeout)),
		fault:        be.faultName(),
		healthyRate:  (sums[0].baseHealthyOK + sums[1].baseHealthyOK) / 2,
		healthyLabel: "calls ok / s for the two healthy " + be.nodes() + " before the fault",
		tl:           tl,
		workers:      o.workers,
		series:       series,
		start:        recs[1].start,
		events:       events,
	}
	f, err := os.Create(o.svg)
	if err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	if err := errors.Join(c.writeSVG(f), f.Close()); err != nil {
		return fmt.Errorf("writing the chart: %w", err)
	}
	fmt.Fprintf(out, "\nChart written to %s (open it in a browser).\n", o.svg)
	return nil
}

// progress is the line at the bottom of the terminal that says how far the
// demo has got. It is drawn on stderr, and only when stderr is a terminal:
// in a pipe or a log the table rows say as much.
type progress struct {
	w     io.Writer
	total time.Duration
	shown bool
}

func newProgress(w io.Writer, total time.Duration) *progress {
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return &progress{w: w, total: total}
		}
	}
	return &progress{total: total}
}

func (p *progress) show(elapsed time.Duration, phase string) {
	if p.w == nil {
		return
	}
	const width = 30
	done := min(int(float64(width)*elapsed.Seconds()/p.total.Seconds()), width)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %4.1fs of %s  %s", strings.Repeat("#", done), strings.Repeat(".", width-done),
		elapsed.Seconds(), fmtSecs(p.total), phase)
	p.shown = true
}

func (p *progress) clear() {
	if p.w != nil && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
