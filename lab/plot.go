package lab

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Chart is one SVG the lab can draw.
type Chart struct {
	File  string // suggested file name
	Write func(w io.Writer, cfg Config) error
}

// Charts lists the lab's pictures: block 5's trade-off and the assembly's
// gap sweep.
var Charts = []Chart{
	{File: "lease-sizing.svg", Write: WriteSizingChart},
	{File: "check-gap.svg", Write: WriteGapChart},
}

// curvePoints is how many points a chart's curve gets between the ends of
// the configured list; the configured values themselves are drawn as dots.
const curvePoints = 61

// WriteSizingChart draws zombie rate (left axis) and wedge cost per
// operation (right axis) against the lease TTL on a log scale.
func WriteSizingChart(w io.Writer, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	hs := drawHolders(cfg.SizingSeed, cfg.Ops)
	lo, hi := spanOf(cfg.TTLs)
	x := newLogAxis(lo, hi)
	var curve, dots []SizingRow
	for _, d := range logSpaced(x.lo, x.hi, curvePoints) {
		curve = append(curve, sizeAt(hs, d))
	}
	for _, d := range cfg.TTLs {
		dots = append(dots, sizeAt(hs, d))
	}
	zMax, wMax := 0.0, 0.0
	for _, r := range append(curve, dots...) {
		zMax = math.Max(zMax, r.ZombieRate*100)
		wMax = math.Max(wMax, r.WedgePerOp*1000)
	}
	left, right := newLinAxis(zMax), newLinAxis(wMax)

	c := newCanvas(fmt.Sprintf("Lease sizing: zombies against wedged time (seed %d, %s holders)",
		cfg.SizingSeed, thousands(cfg.Ops)))
	c.xAxis(x, "lease TTL (seconds, log scale)", func(v float64) string { return trimFloat(v) })
	c.yAxis(left, "zombie rate (% of holders)", colorZombie, false)
	c.yAxis(right, "wedged time per operation (ms)", colorWedge, true)
	zombie := func(r SizingRow) (float64, float64) { return x.at(seconds(r.TTL)), left.at(r.ZombieRate * 100) }
	wedge := func(r SizingRow) (float64, float64) { return x.at(seconds(r.TTL)), right.at(r.WedgePerOp * 1000) }
	series(c, curve, dots, zombie, colorZombie, "")
	series(c, curve, dots, wedge, colorWedge, "")
	// Mid-top is where both curves are low: zombies fall from the left,
	// wedged time rises to the right.
	c.legend(padLeft+plotW/2-146, []legendItem{
		{"zombie rate: holders outliving their lease", colorZombie, ""},
		{"wedge cost: crashes × TTL, per operation", colorWedge, ""},
		{"dots: the TTLs in the table", "#444", "dot"},
	})
	return c.write(w)
}

// WriteGapChart draws the assembly's lost updates against the client
// check's check→write gap, with lease-only and fencing as references.
func WriteGapChart(w io.Writer, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var positive []time.Duration
	for _, g := range cfg.Gaps {
		if g > 0 {
			positive = append(positive, g)
		}
	}
	if len(positive) == 0 {
		positive = DefaultConfig().Gaps // a log axis needs something above zero
	}
	lo, hi := spanOf(positive)
	x := newLogAxis(lo, hi)
	dense := cfg
	dense.Gaps = append(logSpaced(x.lo, x.hi, curvePoints), positive...)
	a, err := assemble(dense) // cfg is valid; only the list grew
	if err != nil {
		return err
	}
	type pt struct {
		gap  time.Duration
		lost int
	}
	var curve, dots []pt
	for i, g := range a.Gaps {
		if i < curvePoints {
			curve = append(curve, pt{g.Gap, g.Lost})
		} else {
			dots = append(dots, pt{g.Gap, g.Lost})
		}
	}
	y := newLinAxis(float64(a.Base) * 1.3) // headroom keeps the key off the lease-only line
	c := newCanvas(fmt.Sprintf("Lost updates against the check→write gap (seed %d, %s operations)",
		a.Seed, thousands(a.Ops)))
	c.xAxis(x, "time from the client's token check to its write (ms, log scale)",
		func(v float64) string { return trimFloat(v * 1000) })
	c.yAxis(y, "lost updates", "#222", false)
	if a.Base > 0 {
		pct := newLinAxis(100 * y.hi / float64(a.Base))
		pct.hi = 100 * y.hi / float64(a.Base) // same scale as the counts
		c.yAxis(pct, "share of lease-only losses (%)", "#666", true)
	}
	c.hline(y.at(float64(a.Base)), colorLease, "6 4")
	c.hline(y.at(0), colorFence, "")
	at := func(p pt) (float64, float64) { return x.at(seconds(p.gap)), y.at(float64(p.lost)) }
	series(c, curve, dots, at, colorCheck, "")
	c.legend(padLeft+16, []legendItem{
		{fmt.Sprintf("lease only: %d lost, whatever the gap", a.Base), colorLease, "dash"},
		{"lease + client check", colorCheck, ""},
		{"lease + fencing: 0 lost", colorFence, ""},
	})
	return c.write(w)
}

const (
	colorZombie = "#c0392b"
	colorWedge  = "#2471a3"
	colorLease  = "#c0392b"
	colorCheck  = "#d68910"
	colorFence  = "#1e8449"
)

// spanOf returns the smallest and largest durations of a non-empty list.
func spanOf(ds []time.Duration) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, d := range ds {
		lo, hi = math.Min(lo, seconds(d)), math.Max(hi, seconds(d))
	}
	return lo, hi
}

// logSpaced returns n durations spread evenly in log between lo and hi.
func logSpaced(lo, hi float64, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		f := float64(i) / float64(n-1)
		s := math.Exp(math.Log(lo) + f*(math.Log(hi)-math.Log(lo)))
		out[i] = max(time.Duration(math.Round(s*1e9)), 1)
	}
	return out
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3g", v)
	if strings.ContainsAny(s, "e") {
		s = fmt.Sprintf("%g", v)
	}
	return s
}

// ---- a very small SVG plotter ------------------------------------------

const (
	chartW, chartH                       = 760, 460
	padLeft, padRight, padTop, padBottom = 80, 90, 56, 64
	plotW                                = chartW - padLeft - padRight
	plotH                                = chartH - padTop - padBottom
)

// logAxis maps [lo, hi] seconds onto the plot's width, logarithmically.
type logAxis struct{ lo, hi float64 }

func newLogAxis(lo, hi float64) logAxis {
	if !(hi > lo) { // one value: give it a decade of room
		lo, hi = lo/math.Sqrt(10), hi*math.Sqrt(10)
	}
	return logAxis{lo, hi}
}

func (a logAxis) at(v float64) float64 {
	f := (math.Log(v) - math.Log(a.lo)) / (math.Log(a.hi) - math.Log(a.lo))
	return padLeft + f*plotW
}

// ticks are 1, 2 and 5 times powers of ten inside the range.
func (a logAxis) ticks() []float64 {
	var out []float64
	for e := math.Floor(math.Log10(a.lo)); e <= math.Ceil(math.Log10(a.hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= a.lo*(1-1e-9) && v <= a.hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}

// linAxis maps [0, hi] onto the plot's height with a round top and step.
type linAxis struct{ hi, step float64 }

func newLinAxis(max float64) linAxis {
	if !(max > 0) {
		return linAxis{hi: 1, step: 0.2}
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return linAxis{hi: math.Ceil(max/step-1e-9) * step, step: step}
}

func (a linAxis) at(v float64) float64 { return padTop + plotH - v/a.hi*plotH }

type legendItem struct{ label, color, style string }

type canvas struct{ b strings.Builder }

func newCanvas(title string) *canvas {
	c := &canvas{}
	c.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	c.printf(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	c.printf(`<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", padLeft, escape(title))
	c.printf(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", padLeft, padTop, plotW, plotH)
	return c
}

func (c *canvas) printf(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *canvas) xAxis(a logAxis, label string, tick func(float64) string) {
	for _, v := range a.ticks() {
		x := a.at(v)
		c.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", x, padTop, x, padTop+plotH)
		c.printf(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, padTop+plotH+18, tick(v))
	}
	c.printf(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padLeft+plotW/2, chartH-18, escape(label))
}

func (c *canvas) yAxis(a linAxis, label, color string, right bool) {
	x, anchor, lx, rot := padLeft-8, "end", 22, -90
	if right {
		x, anchor, lx, rot = padLeft+plotW+8, "start", chartW-16, 90
	}
	for i := 0; float64(i)*a.step <= a.hi*(1+1e-9); i++ {
		v := float64(i) * a.step
		y := a.at(v)
		if !right {
			c.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", padLeft, y, padLeft+plotW, y)
		}
		c.printf(`<text x="%d" y="%.1f" text-anchor="%s" fill="%s" dominant-baseline="middle">%s</text>`+"\n",
			x, y, anchor, color, trimFloat(v))
	}
	cy := padTop + plotH/2
	c.printf(`<text x="%d" y="%d" text-anchor="middle" fill="%s" transform="rotate(%d %d %d)">%s</text>`+"\n",
		lx, cy, color, rot, lx, cy, escape(label))
}

// series draws a curve through the points and a dot on each marked one.
func series[P any](c *canvas, curve, dots []P, at func(P) (float64, float64), color, dash string) {
	var pts []string
	for _, p := range curve {
		x, y := at(p)
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	c.printf(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n",
		strings.Join(pts, " "), color, dash)
	for _, p := range dots {
		x, y := at(p)
		c.printf(`<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="white"/>`+"\n", x, y, color)
	}
}

func (c *canvas) hline(y float64, color, dash string) {
	c.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n",
		padLeft, y, padLeft+plotW, y, color, dash)
}

// legend draws a key at the top of the plot, its box starting at x.
func (c *canvas) legend(x int, items []legendItem) {
	y := padTop + 12
	c.printf(`<rect x="%d" y="%d" width="292" height="%d" fill="white" fill-opacity="0.9" stroke="#ccc"/>`+"\n",
		x-8, y-10, 20*len(items)+6)
	for i, it := range items {
		yy := y + 20*i + 4
		switch it.style {
		case "dot":
			c.printf(`<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", x+12, yy, it.color)
		default:
			dash := ""
			if it.style == "dash" {
				dash = "6 4"
			}
			c.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`+"\n",
				x, yy, x+24, yy, it.color, dash)
		}
		c.printf(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+32, yy, escape(it.label))
	}
}

func (c *canvas) write(w io.Writer) error {
	c.printf("</svg>\n")
	_, err := io.WriteString(w, c.b.String())
	return err
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
