package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redisguard/redisguard"
)

// chart is what the SVG shows: calls per second for each side, split into
// served (ok) and failed, and how many callers were stuck, over time, with
// the fault window shaded and redisguard's breaker events marked.
type chart struct {
	title, subtitle string
	fault           string // label of the shaded window
	tl              timeline
	workers         int
	series          [2]chartSeries // go-redis, redisguard
	// healthyRate is the rate at which the healthy nodes' keys were served
	// before the fault, drawn across the fault window as the level a side
	// that kept serving them would hold; 0 draws nothing.
	healthyRate  float64
	healthyLabel string
	start        time.Time // when the run started: event times are relative to it
	events       []redisguard.Event
}

type chartSeries struct {
	name  string
	color string
	ticks []tickStats
}

// Geometry of the drawing, in SVG user units (pixels at 100%).
const (
	svgW, svgH         = 960, 660
	plotL, plotR       = 90, svgW - 40
	rateTop, rateBot   = 170, 410
	waitTop, waitBot   = 480, 590
	legendY            = 76
	legendRowH         = 18
	legendColW         = 230
	rateBucket         = 5 // ticks per point of the calls/s lines: per-tick counts are noisy
	eventLabelFontSize = 10
)

var (
	colorStock = "#d1495b" // go-redis
	colorGuard = "#2e6fba" // redisguard
)

// healthyStroke draws the level of the healthy nodes' calls before the fault.
const healthyStroke = `stroke="#888" stroke-width="1.2"`

// writeSVG renders c as a standalone SVG document.
func (c chart) writeSVG(w io.Writer) error {
	var b bytes.Buffer
	end := c.tl.end.Seconds()
	x := func(sec float64) float64 { return plotL + (plotR-plotL)*sec/end }

	maxRate := 1.0
	for _, s := range c.series {
		for _, p := range rates(s.ticks) {
			maxRate = max(maxRate, p.ok, p.failed)
		}
	}
	rateStep := max(niceStep(maxRate/5), 1) // whole calls: the labels are rounded
	rateMax := rateStep * math.Ceil(maxRate/rateStep)
	yRate := func(v float64) float64 { return rateBot - (rateBot-rateTop)*v/rateMax }
	yWait := func(v float64) float64 { return waitBot - (waitBot-waitTop)*v/float64(max(c.workers, 1)) }

	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12" fill="#222">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(c.title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="30" font-size="18" font-weight="bold">%s</text>`+"\n", plotL, esc(c.title))
	fmt.Fprintf(&b, `<text x="%d" y="52" font-size="13" fill="#555">%s</text>`+"\n", plotL, esc(c.subtitle))

	// Legend: one row per side; colour is the side, dash the outcome.
	for i, s := range c.series {
		y := float64(legendY + i*legendRowH)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold" fill="%s">%s</text>`+"\n", plotL, y+4, s.color, esc(s.name))
		for j, failed := range []bool{false, true} {
			lx := float64(plotL + 150 + j*legendColW)
			label := "calls ok / s"
			if failed {
				label = "calls failed / s"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"%s/>`+"\n",
				lx, y, lx+30, y, s.color, strokeWidth(failed), dash(failed))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+38, y+4, label)
		}
	}
	lx := float64(plotL + 150 + 2*legendColW)
	fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="30" height="12" fill="#f6d5d5"/>`+"\n", lx, legendY-6)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", lx+38, legendY+4, esc(c.fault))
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="2 3"/>`+"\n",
		lx+15, legendY+legendRowH-7, lx+15, legendY+legendRowH+7, colorGuard)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d">redisguard breaker event</text>`+"\n", lx+38, legendY+legendRowH+4)
	if c.healthyRate > 0 {
		lx, y := float64(plotL+150), legendY+2*legendRowH
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" %s/>`+"\n", lx, y, lx+30, y, healthyStroke)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", lx+38, y+4, esc(c.healthyLabel))
	}

	// The fault window goes first, so everything else is drawn over it.
	x0, x1 := x(c.tl.faultAt.Seconds()), x(c.tl.healAt.Seconds())
	for _, p := range [][2]float64{{rateTop, rateBot}, {waitTop, waitBot}} {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f6d5d5" fill-opacity="0.6"/>`+"\n",
			x0, p[0], x1-x0, p[1]-p[0])
	}

	// Calls-per-second panel.
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">Calls per second</text>`+"\n", plotL, rateTop-38)
	for v := 0.0; v <= rateMax+rateStep/2; v += rateStep {
		gridLine(&b, yRate(v), groupThousands(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(28 %d) rotate(-90)" text-anchor="middle">calls / s</text>`+"\n", (rateTop+rateBot)/2)
	if c.healthyRate > 0 {
		y := yRate(c.healthyRate)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s/>`+"\n", x0, y, x1, y, healthyStroke)
	}
	for _, s := range c.series {
		pts := rates(s.ticks)
		for _, failed := range []bool{false, true} {
			var line []string
			for _, p := range pts {
				if p.at > end {
					break
				}
				v := p.ok
				if failed {
					v = p.failed
				}
				line = append(line, fmt.Sprintf("%.1f,%.1f", x(p.at), yRate(v)))
			}
			polyline(&b, line, s.color, strokeWidth(failed), dash(failed))
		}
	}
	c.eventMarks(&b, x, end)
	axes(&b, rateTop, rateBot)
	xTicks(&b, rateBot, end, x, false)

	// Waiting-callers panel.
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">Callers stuck: in a Redis call for over %s (average, of %d per side)</text>`+"\n",
		plotL, waitTop-12, fmtLat(stuckAfter), c.workers)
	for _, v := range []int{0, c.workers / 2, c.workers} {
		gridLine(&b, yWait(float64(v)), strconv.Itoa(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(28 %d) rotate(-90)" text-anchor="middle">callers</text>`+"\n", (waitTop+waitBot)/2)
	for _, s := range c.series {
		var line []string
		for _, p := range rates(s.ticks) {
			if p.at > end {
				break
			}
			line = append(line, fmt.Sprintf("%.1f,%.1f", x(p.at), yWait(p.stuck)))
		}
		polyline(&b, line, s.color, "2.5", "")
	}
	axes(&b, waitTop, waitBot)
	xTicks(&b, waitBot, end, x, true)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">seconds since start</text>`+"\n", (plotL+plotR)/2, waitBot+40)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="10" fill="#888">redisguard demo (go run ./cmd/redisguard demo)</text>`+"\n", plotR, svgH-8)
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// eventMarks draws redisguard's breaker transitions as dotted verticals
// across the calls panel, labelled above it (see placeMarks).
func (c chart) eventMarks(b *bytes.Buffer, x func(float64) float64, end float64) {
	var xs []float64
	var labels []string
	for _, e := range c.events {
		var label string
		switch e.Kind {
		case redisguard.EventBreakerOpened:
			label = "opened"
		case redisguard.EventBreakerHalfOpen:
			label = "half-open"
		case redisguard.EventBreakerClosed:
			label = "closed"
		default:
			continue
		}
		at := e.Time.Sub(c.start).Seconds()
		if at < 0 || at > end {
			continue
		}
		xs, labels = append(xs, x(at)), append(labels, label)
	}
	marks := placeMarks(xs, labels)
	for _, m := range marks {
		top := float64(rateTop)
		if m.row >= 0 {
			top = m.baseline() + 3
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="2 3"/>`+"\n",
			m.x, top, m.x, rateBot, colorGuard)
	}
	// Labels go over every line, with a white halo, so that a line from
	// an upper row passing behind a lower label does not strike it out.
	for _, m := range marks {
		if m.row < 0 {
			continue
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%d" fill="%s" text-anchor="middle" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
			m.x, m.baseline(), eventLabelFontSize, colorGuard, esc(m.label))
	}
}

// Layout of the event labels above the calls panel.
const (
	labelRows    = 3   // rows of labels, the lowest just above the panel
	labelRowH    = 12  // distance between rows
	labelGap     = 6   // least room between two labels on a row
	labelMerge   = 4.0 // events closer than this share one mark and label
	labelCharW   = 6.4 // width of a character at eventLabelFontSize, a little over DejaVu Sans's
	labelPadding = 7   // from the lowest row's baseline to the panel's top
)

// mark is one vertical: the events at x, and the row (0 the lowest) its
// label is on, or -1 for none.
type mark struct {
	x     float64
	label string
	row   int
}

func (m mark) baseline() float64 { return float64(rateTop - labelPadding - labelRowH*m.row) }

// width is the label's estimated width on the page.
func (m mark) width() float64 { return labelCharW * float64(len([]rune(m.label))) }

// placeMarks turns events at xs (in time order) into marks: events within
// labelMerge of the mark before share it ("half-open, closed": a probe
// answered and the first command after it usually come milliseconds
// apart), and each label goes on the lowest row where it keeps labelGap
// from the labels already there. When every row is taken there, the mark
// has no label: a bare line says less, but a label printed over another
// says nothing.
func placeMarks(xs []float64, labels []string) []mark {
	var marks []mark
	for i, x := range xs {
		if n := len(marks); n > 0 && x-marks[n-1].x < labelMerge {
			if !strings.HasSuffix(marks[n-1].label, labels[i]) {
				marks[n-1].label += ", " + labels[i]
			}
			continue
		}
		marks = append(marks, mark{x: x, label: labels[i]})
	}
	var rowEnd [labelRows]float64
	for r := range rowEnd {
		rowEnd[r] = math.Inf(-1)
	}
	for i := range marks {
		m := &marks[i]
		m.row = -1
		for r := range rowEnd {
			if rowEnd[r]+labelGap <= m.x-m.width()/2 {
				m.row = r
				rowEnd[r] = m.x + m.width()/2
				break
			}
		}
	}
	return marks
}

func gridLine(b *bytes.Buffer, y float64, label string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e3e3e3"/>`+"\n", plotL, y, plotR, y)
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#444"/>`+"\n", plotL-5, y, plotL, y)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotL-8, y+4, esc(label))
}

func polyline(b *bytes.Buffer, points []string, color, width, dashAttr string) {
	if len(points) == 0 {
		return
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"%s points="%s"/>`+"\n",
		color, width, dashAttr, strings.Join(points, " "))
}

// ratePoint is one bucket of rateBucket ticks, at its centre: calls per
// second, and the average number of stuck callers.
type ratePoint struct{ at, ok, failed, stuck float64 }

func rates(ticks []tickStats) []ratePoint {
	var out []ratePoint
	perSec := float64(time.Second) / float64(rateBucket*tick)
	for i := 0; i < len(ticks); i += rateBucket {
		var p ratePoint
		for _, t := range ticks[i:min(i+rateBucket, len(ticks))] {
			p.ok += float64(t.ok)
			p.failed += float64(t.failed)
			p.stuck += t.stuckCallers()
		}
		p.ok *= perSec
		p.failed *= perSec
		p.stuck /= rateBucket
		p.at = (float64(i) + float64(rateBucket)/2) * tick.Seconds()
		out = append(out, p)
	}
	return out
}

func axes(b *bytes.Buffer, top, bot int) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`+"\n", plotL, top, plotL, bot)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`+"\n", plotL, bot, plotR, bot)
}

// xTicks marks every second (every 2 or 5 on long runs) below a panel.
func xTicks(b *bytes.Buffer, bot int, end float64, x func(float64) float64, labels bool) {
	step := 1.0
	if end > 20 {
		step = 2
	}
	if end > 50 {
		step = 5
	}
	for s := 0.0; s <= end+1e-9; s += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#444"/>`+"\n", x(s), bot, x(s), bot+5)
		if labels {
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(s), bot+19, strconv.FormatFloat(s, 'f', -1, 64))
		}
	}
}

func strokeWidth(failed bool) string {
	if failed {
		return "1.8"
	}
	return "2.8"
}

func dash(failed bool) string {
	if failed {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

// niceStep rounds a raw tick spacing up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// groupThousands renders a whole number with thin separators: 12,000.
func groupThousands(v float64) string {
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
