package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteSVGIsWellFormedAndEscaped(t *testing.T) {
	c := Chart{
		Title:  "GET <standalone> & co",
		XLabel: "callers", YLabel: "ops/s",
		X: []string{"1", "8", "64", "512"},
		Series: []Series{
			{Name: "go-redis", Y: []float64{1000, 8000, 30000, 31000}},
			{Name: `redis"guard`, Dashed: true, Y: []float64{990, 7900, math.NaN(), 30500}},
		},
		Ref: 20000, RefLabel: "target",
	}
	var b bytes.Buffer
	require.NoError(t, c.WriteSVG(&b))
	out := b.String()

	dec := xml.NewDecoder(strings.NewReader(out))
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "not well-formed XML")
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	assert.Contains(t, texts, "GET <standalone> & co")
	assert.Contains(t, texts, `redis"guard`)
	assert.Contains(t, texts, "target")
	assert.Equal(t, 2, strings.Count(out, "<path "), "one line per series")
	assert.Equal(t, 7, strings.Count(out, "<circle "), "a NaN is a gap, not a point")
	assert.Contains(t, out, "stroke-dasharray=\"5 3\"")
}

func TestWriteSVGRejectsMismatchedSeries(t *testing.T) {
	c := Chart{Title: "t", X: []string{"a", "b"}, Series: []Series{{Name: "s", Y: []float64{1}}}}
	assert.ErrorContains(t, c.WriteSVG(io.Discard), `series "s" has 1 values for 2 categories`)
	assert.Error(t, Chart{Title: "empty"}.WriteSVG(io.Discard))
}

func TestYRangeAndTicks(t *testing.T) {
	lo, hi := Chart{Series: []Series{{Y: []float64{10, 50}}}}.yRange()
	assert.Equal(t, 0.0, lo)
	assert.InDelta(t, 54, hi, 1e-9)
	lo, hi = Chart{YMin: 0.9, YMax: 1.1}.yRange()
	assert.Equal(t, []float64{0.9, 1.1}, []float64{lo, hi})

	ts := ticks(0, 54)
	require.NotEmpty(t, ts)
	assert.Equal(t, 0.0, ts[0])
	assert.LessOrEqual(t, len(ts), 7)
	for i := 1; i < len(ts); i++ {
		assert.Greater(t, ts[i], ts[i-1])
	}
	assert.Equal(t, "1.5k", format(1500))
	assert.Equal(t, "2M", format(2e6))
	assert.Equal(t, "0.98", format(0.98))
}
