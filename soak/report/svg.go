package report

import (
	"fmt"
	"html"
	"strings"
	"time"
)

// Plot geometry, in SVG user units.
const (
	plotWidth  = 900
	plotHeight = 320
	marginL    = 60
	marginR    = 20
	marginT    = 30
	marginB    = 40
)

// DepthSVG plots pending writes (summed and the deepest queue) and dead
// letters over time, with a dashed line at every marker.
func DepthSVG(samples []DepthSample, markers []Marker) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">Queued writes over time (all clients)</text>`+"\n", marginL)
	var span time.Duration
	top := 1
	for _, s := range samples {
		span = max(span, s.At)
		top = max(top, s.Pending, s.DeadLetters)
	}
	for _, m := range markers {
		span = max(span, m.At)
	}
	span = max(span, time.Second)
	top = niceCeil(max(top, 5))
	w, h := float64(plotWidth-marginL-marginR), float64(plotHeight-marginT-marginB)
	x := func(d time.Duration) float64 { return marginL + w*float64(d)/float64(span) }
	y := func(v int) float64 { return marginT + h - h*float64(v)/float64(top) }

	// axes and ticks
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", marginL, marginT, marginL, plotHeight-marginB)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", marginL, plotHeight-marginB, plotWidth-marginR, plotHeight-marginB)
	for i := 0; i <= 5; i++ {
		v := top * i / 5
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, y(v), plotWidth-marginR, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%d</text>`+"\n", marginL-6, y(v)+4, v)
		t := span * time.Duration(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(t), plotHeight-marginB+16, t.Round(time.Second))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">time since start</text>`+"\n", marginL+int(w/2), plotHeight-6)

	for _, m := range markers {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c33" stroke-dasharray="4 3"/>`+"\n", x(m.At), marginT, x(m.At), plotHeight-marginB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#c33" text-anchor="middle" font-size="9">%s</text>`+"\n", x(m.At), marginT-2, html.EscapeString(m.Label))
	}
	line := func(color, dash string, value func(DepthSample) int) {
		if len(samples) == 0 {
			return
		}
		var pts strings.Builder
		for _, s := range samples {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(s.At), y(value(s)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="%s" points="%s"/>`+"\n", color, dash, strings.TrimSpace(pts.String()))
	}
	line("#1f5fbf", "none", func(s DepthSample) int { return s.Pending })
	line("#e08a00", "5 3", func(s DepthSample) int { return s.MaxPending })
	line("#777", "2 2", func(s DepthSample) int { return s.DeadLetters })

	legend := []struct{ color, dash, label string }{
		{"#1f5fbf", "none", "pending, all clients"},
		{"#e08a00", "5 3", "pending, deepest queue"},
		{"#777", "2 2", "dead letters"},
		{"#c33", "4 3", "syncd kill / restart"},
	}
	for i, l := range legend {
		lx := plotWidth - marginR - 170
		ly := marginT + 12 + 14*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="%s"/>`+"\n", lx, ly, lx+20, ly, l.color, l.dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+26, ly+4, l.label)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}
