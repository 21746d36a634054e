package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"

	"github.com/harness9/compaction-operator/compaction"
)

// plotInput is what renderPlot draws.
type plotInput struct {
	Title  string // usually the transcript's file name
	Config compaction.Config
	Series []turnResult
}

// Chart geometry, in SVG user units (pixels).
const (
	plotWidth   = 980
	plotHeight  = 560
	plotLeft    = 76
	plotRight   = 200 // room for the legend
	plotTop     = 64
	plotBottom  = 64
	plotAreaW   = plotWidth - plotLeft - plotRight
	plotAreaH   = plotHeight - plotTop - plotBottom
	colorBefore = "#1f6feb"
	colorAfter  = "#2ea043"

	// maxTitleName is the longest file name shown whole in the visible title (the
	// document's <title> always has all of it).
	maxTitleName = 60
)

// tierColors are the marker, band and threshold colors of the four compaction tiers.
var tierColors = map[compaction.Tier]string{
	compaction.TierWarn:      "#c9a000",
	compaction.TierSoft:      "#e67e22",
	compaction.TierFull:      "#d64541",
	compaction.TierEmergency: "#8e44ad",
}

// renderPlot draws the context usage per turn as a standalone SVG document: usage before
// compaction (solid line) and after (dashed line), the four tier thresholds as labelled
// bands, and one marker per compaction colored by its tier. It uses no dependency and no
// external resource, so the file opens in any browser.
func renderPlot(in plotInput) string {
	pl := newPlotter(in)
	pl.header()
	pl.bands()
	pl.axes()
	if pl.n == 0 {
		pl.p(`<text x="%d" y="%d" text-anchor="middle" font-size="14" fill="#777">No turn to compact: the transcript has no assistant message after a user message.</text>`+"\n",
			plotLeft+plotAreaW/2, plotTop+plotAreaH/2)
	} else {
		pl.usage()
		pl.markers()
	}
	pl.legend()
	pl.p("</svg>\n")
	return pl.b.String()
}

// plotThreshold is one tier's threshold, in percent of the window.
type plotThreshold struct {
	tier compaction.Tier
	pct  float64
}

// plotter is one renderPlot: its input, scales and the document being written.
type plotter struct {
	in         plotInput
	thresholds []plotThreshold
	n          int     // turns
	yStep      float64 // percent between two y ticks
	yMax       float64 // percent at the top of the plot area
	b          strings.Builder
}

func newPlotter(in plotInput) *plotter {
	cfg := in.Config
	pl := &plotter{in: in, n: len(in.Series), thresholds: []plotThreshold{
		{compaction.TierWarn, cfg.WarnThreshold * 100},
		{compaction.TierSoft, cfg.SoftThreshold * 100},
		{compaction.TierFull, cfg.FullThreshold * 100},
		{compaction.TierEmergency, cfg.EmergencyThreshold * 100},
	}}
	peak := 100.0
	for _, t := range in.Series {
		peak = math.Max(peak, math.Max(t.UsageBefore, t.UsageAfter)*100)
	}
	pl.yStep = niceStep(peak, 10)
	pl.yMax = math.Ceil(peak/pl.yStep) * pl.yStep
	return pl
}

func (pl *plotter) p(format string, args ...any) { fmt.Fprintf(&pl.b, format, args...) }

// xOf is the x coordinate of a turn (1-based).
func (pl *plotter) xOf(turn int) float64 {
	if pl.n <= 1 {
		return plotLeft + plotAreaW/2
	}
	return plotLeft + float64(turn-1)/float64(pl.n-1)*plotAreaW
}

// yOf is the y coordinate of a usage in percent.
func (pl *plotter) yOf(pct float64) float64 { return plotTop + plotAreaH - pct/pl.yMax*plotAreaH }

// header writes the document's start, background and titles.
func (pl *plotter) header() {
	in, cfg := pl.in, pl.in.Config
	pl.p("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	pl.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	compactions := 0
	for _, t := range in.Series {
		if t.Tier != compaction.TierNone {
			compactions++
		}
	}
	title := fmt.Sprintf("Context usage: %s (window %d tokens)", in.Title, cfg.ContextWindow)
	pl.p("<title>%s</title>\n", esc(title))
	pl.p(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", plotWidth, plotHeight)
	shown := fmt.Sprintf("Context usage: %s (window %d tokens)", shorten(in.Title, maxTitleName), cfg.ContextWindow)
	pl.p(`<text x="%d" y="26" font-size="16" font-weight="bold" fill="#222">%s</text>`+"\n", plotLeft, esc(shown))
	pl.p(`<text x="%d" y="46" fill="#555">%s</text>`+"\n", plotLeft,
		esc(fmt.Sprintf("%d turns, %d compactions; usage = estimated tokens (bytes / 4) / window, before and after each compaction", pl.n, compactions)))
}

// bands writes the tier bands and threshold lines.
func (pl *plotter) bands() {
	pl.p(`<g id="thresholds">` + "\n")
	for i, th := range pl.thresholds {
		upper := pl.yMax
		if i+1 < len(pl.thresholds) {
			upper = pl.thresholds[i+1].pct
		}
		color := tierColors[th.tier]
		pl.p(`<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s" fill-opacity="0.08"/>`+"\n",
			plotLeft, pl.yOf(upper), plotAreaW, pl.yOf(th.pct)-pl.yOf(upper), color)
		pl.p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1" stroke-dasharray="6 4"/>`+"\n",
			plotLeft, pl.yOf(th.pct), plotLeft+plotAreaW, pl.yOf(th.pct), color)
		pl.p(`<text x="%d" y="%.1f" text-anchor="end" font-size="11" fill="%s" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s %s%%</text>`+"\n",
			plotLeft+plotAreaW-4, pl.yOf(th.pct)-4, color, th.tier, trimFloat(th.pct))
	}
	pl.p("</g>\n")
}

// axes writes the axes, the grid, the tick labels and the axis titles.
func (pl *plotter) axes() {
	pl.p(`<g id="axes" stroke="#333" stroke-width="1">` + "\n")
	pl.p(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotTop, plotLeft, plotTop+plotAreaH)
	pl.p(`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", plotLeft, plotTop+plotAreaH, plotLeft+plotAreaW, plotTop+plotAreaH)
	pl.p("</g>\n")
	pl.p(`<g id="y-ticks" font-size="11" fill="#333">` + "\n")
	for v := 0.0; v <= pl.yMax+pl.yStep/1000; v += pl.yStep {
		y := pl.yOf(v)
		pl.p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotLeft+1, y, plotLeft+plotAreaW, y)
		pl.p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", plotLeft-4, y, plotLeft, y)
		pl.p(`<text x="%d" y="%.1f" text-anchor="end">%s%%</text>`+"\n", plotLeft-7, y+4, trimFloat(v))
	}
	pl.p("</g>\n")
	pl.p(`<g id="x-ticks" font-size="11" fill="#333">` + "\n")
	for _, t := range xTicks(pl.n) {
		x := pl.xOf(t)
		pl.p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x, plotTop+plotAreaH, x, plotTop+plotAreaH+4)
		pl.p(`<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, plotTop+plotAreaH+17, t)
	}
	pl.p("</g>\n")
	pl.p(`<text x="%d" y="%d" text-anchor="middle" fill="#222">Turn (one compaction before each assistant message)</text>`+"\n",
		plotLeft+plotAreaW/2, plotHeight-18)
	pl.p(`<text transform="translate(%d %d) rotate(-90)" text-anchor="middle" fill="#222">Context usage (%% of window)</text>`+"\n",
		22, plotTop+plotAreaH/2)
}

// usage writes the usage lines, before and after compaction.
func (pl *plotter) usage() {
	var before, after strings.Builder
	for i, t := range pl.in.Series {
		if i > 0 {
			before.WriteByte(' ')
			after.WriteByte(' ')
		}
		fmt.Fprintf(&before, "%.1f,%.1f", pl.xOf(t.Turn), pl.yOf(t.UsageBefore*100))
		fmt.Fprintf(&after, "%.1f,%.1f", pl.xOf(t.Turn), pl.yOf(t.UsageAfter*100))
	}
	pl.p(`<polyline id="usage-before" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`+"\n", colorBefore, before.String())
	pl.p(`<polyline id="usage-after" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3" stroke-linejoin="round" points="%s"/>`+"\n", colorAfter, after.String())
}

// markers writes one marker per compaction, with a drop line to the usage after it.
func (pl *plotter) markers() {
	pl.p(`<g id="compactions">` + "\n")
	for _, t := range pl.in.Series {
		if t.Tier == compaction.TierNone {
			continue
		}
		color := tierColors[t.Tier]
		x, y0, y1 := pl.xOf(t.Turn), pl.yOf(t.UsageBefore*100), pl.yOf(t.UsageAfter*100)
		pl.p(`<g><title>%s</title>`, esc(fmt.Sprintf("turn %d (message %d): %s, %.1f%% -> %.1f%% (%d -> %d tokens)",
			t.Turn, t.Index, t.Tier, t.UsageBefore*100, t.UsageAfter*100, t.TokensBefore, t.TokensAfter)))
		pl.p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.5" stroke-width="1.5"/>`, x, y0, x, y1, color)
		pl.p(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="#ffffff" stroke-width="1"/></g>`+"\n", x, y0, color)
	}
	pl.p("</g>\n")
}

// legend writes the legend box.
func (pl *plotter) legend() {
	lx, ly := plotLeft+plotAreaW+18, plotTop+8
	pl.p(`<g id="legend" font-size="12" fill="#222">` + "\n")
	pl.p(`<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ddd"/>`+"\n", lx-8, ly-8, plotRight-14, 6*22+30)
	pl.p(`<text x="%d" y="%d" font-weight="bold">Legend</text>`+"\n", lx, ly+8)
	ly += 26
	pl.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">before compaction</text>`+"\n",
		lx, ly, lx+22, ly, colorBefore, lx+30, ly+4)
	ly += 22
	pl.p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="5 3"/><text x="%d" y="%d">after compaction</text>`+"\n",
		lx, ly, lx+22, ly, colorAfter, lx+30, ly+4)
	for _, th := range pl.thresholds {
		ly += 22
		pl.p(`<circle cx="%d" cy="%d" r="4.5" fill="%s"/><text x="%d" y="%d">%s (from %s%%)</text>`+"\n",
			lx+11, ly, tierColors[th.tier], lx+30, ly+4, th.tier, trimFloat(th.pct))
	}
	pl.p("</g>\n")
}

// niceStep returns a step of the form {1, 2, 2.5, 5} x 10^k that divides [0, max] into at
// most maxTicks intervals.
func niceStep(max float64, maxTicks int) float64 {
	if max <= 0 || maxTicks < 1 {
		return 1
	}
	raw := max / float64(maxTicks)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if s := m * mag; s >= raw {
			return s
		}
	}
	return 10 * mag
}

// xTicks returns the turns labelled on the x axis: the first, then round multiples.
func xTicks(n int) []int {
	if n < 1 {
		return nil
	}
	step := int(math.Ceil(niceStep(float64(n), 10)))
	if step < 1 {
		step = 1
	}
	ticks := []int{1}
	for v := step; v <= n; v += step {
		if v != 1 {
			ticks = append(ticks, v)
		}
	}
	return ticks
}

// trimFloat formats v without a useless fraction: 60, 62.5.
func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// shorten cuts s to about max runes, eliding its middle.
func shorten(s string, max int) string {
	r := []rune(s)
	if len(r) <= max || max < 5 {
		return s
	}
	head := (max - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(max-1-head):])
}

// esc escapes s for XML character data and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // writing to a strings.Builder cannot fail
	return b.String()
}
