// Package svgplot draws the line charts of the scale benchmarks as
// standalone SVG documents: a categorical x axis (caller counts, pipeline
// lengths), a linear y axis from zero or from a given floor, one line per
// series, a legend and an optional horizontal reference line. It has no
// dependencies and escapes every text it writes.
package svgplot

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
)

// Chart is one line chart.
type Chart struct {
	Title, XLabel, YLabel string
	X                     []string // category labels, left to right
	Series                []Series
	// YMin and YMax fix the y range; when both are zero it runs from 0 to
	// just above the largest value.
	YMin, YMax float64
	// Ref draws a dashed horizontal line at this y (with RefLabel) when
	// RefLabel is set.
	Ref      float64
	RefLabel string
}

// Series is one line: a value per X category; NaN leaves a gap.
type Series struct {
	Name   string
	Color  string // any SVG colour; a palette colour when empty
	Dashed bool
	Y      []float64
}

var palette = []string{"#d1495b", "#edae49", "#2e6fba", "#00798c", "#66a182", "#8d5a97", "#333333"}

const (
	width, height      = 760, 420
	left, right        = 80, width - 200
	top, bottom        = 50, height - 60
	legendX, legendRow = right + 20, 20
)

// WriteSVG renders c. It fails when a series has not one value per category.
func (c Chart) WriteSVG(w io.Writer) error {
	if len(c.X) == 0 {
		return fmt.Errorf("svgplot: %q has no categories", c.Title)
	}
	for _, s := range c.Series {
		if len(s.Y) != len(c.X) {
			return fmt.Errorf("svgplot: series %q has %d values for %d categories", s.Name, len(s.Y), len(c.X))
		}
	}
	lo, hi := c.yRange()
	x := func(i int) float64 {
		if len(c.X) == 1 {
			return (left + right) / 2
		}
		return left + float64(i)*(right-left)/float64(len(c.X)-1)
	}
	y := func(v float64) float64 { return bottom - (v-lo)/(hi-lo)*(bottom-top) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	text(&b, width/2, 24, "middle", 15, c.Title)

	// Axes, grid and ticks.
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`+"\n", left, bottom, right, bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`+"\n", left, top, left, bottom)
	for _, t := range ticks(lo, hi) {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(t), right, y(t))
		text(&b, left-6, y(t)+4, "end", 11, format(t))
	}
	for i, l := range c.X {
		text(&b, x(i), bottom+18, "middle", 11, l)
	}
	text(&b, (left+right)/2, bottom+40, "middle", 12, c.XLabel)
	fmt.Fprintf(&b, `<text x="18" y="%d" text-anchor="middle" font-size="12" transform="rotate(-90 18 %d)">`, (top+bottom)/2, (top+bottom)/2)
	_ = xml.EscapeText(&b, []byte(c.YLabel))
	b.WriteString("</text>\n")

	if c.RefLabel != "" && c.Ref >= lo && c.Ref <= hi {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#999" stroke-dasharray="6 4"/>`+"\n", left, y(c.Ref), right, y(c.Ref))
		text(&b, right-4, y(c.Ref)-4, "end", 10, c.RefLabel)
	}

	for si, s := range c.Series {
		color := s.Color
		if color == "" {
			color = palette[si%len(palette)]
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		var path bytes.Buffer
		pen := false
		for i, v := range s.Y {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(i), y(v))
			pen = true
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(i), y(v), attr(color))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", path.String(), attr(color), dash)
		ly := top + si*legendRow
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", legendX, ly, legendX+24, ly, attr(color), dash)
		text(&b, legendX+30, float64(ly)+4, "start", 11, s.Name)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

func (c Chart) yRange() (lo, hi float64) {
	if c.YMin != 0 || c.YMax != 0 {
		return c.YMin, c.YMax
	}
	for _, s := range c.Series {
		for _, v := range s.Y {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && v > hi {
				hi = v
			}
		}
	}
	if hi == 0 {
		hi = 1
	}
	return 0, hi * 1.08
}

// ticks returns about five round values between lo and hi.
func ticks(lo, hi float64) []float64 {
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step/1e6; t += step {
		out = append(out, t)
	}
	return out
}

func format(v float64) string {
	switch {
	case math.Abs(v) >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case math.Abs(v) >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
	}
}

func text[T int | float64](b *bytes.Buffer, x, y T, anchor string, size int, s string) {
	fmt.Fprintf(b, `<text x="%v" y="%v" text-anchor="%s" font-size="%d">`, x, y, anchor, size)
	_ = xml.EscapeText(b, []byte(s))
	b.WriteString("</text>\n")
}

// attr escapes a value for a double-quoted attribute.
func attr(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
