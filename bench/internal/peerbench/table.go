package peerbench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Ratio is fencelock's value divided by the system's, or false when either
// is missing or zero. For rates above 1 means fencelock is faster; for
// latencies below 1 means fencelock answers sooner.
func Ratio(fencelock, system float64) (float64, bool) {
	if fencelock <= 0 || system <= 0 {
		return 0, false
	}
	return fencelock / system, true
}

var units = map[Workload]string{
	W1: "cycles/s",
	W2: "hand-offs/s",
	W3: "extends/s",
	W4: "locks/s (fill)",
	W5: "extends/s",
}

// FormatTable writes results as one table, grouped by workload in the order
// given, with each rate and p99 as a ratio to fencelock's in the same
// workload. markdown selects a GitHub table instead of aligned text.
func FormatTable(w io.Writer, results []Result, markdown bool) error {
	header := []string{"workload", "system", "rate", "unit", "fl/x rate", "p50", "p99", "fl/x p99", "errors", "details"}
	rows := [][]string{}
	base := map[Workload]Result{}
	for _, r := range results {
		if r.System == "fencelock" && r.Skipped == "" {
			base[r.Workload] = r
		}
	}
	for _, r := range results {
		if r.Skipped != "" {
			rows = append(rows, []string{string(r.Workload), r.System, "n/a", units[r.Workload], "", "", "", "", "", r.Skipped})
			continue
		}
		rr, rp := "—", "—"
		if b, ok := base[r.Workload]; ok {
			if x, ok := Ratio(b.Rate, r.Rate); ok {
				rr = fmt.Sprintf("%.2f×", x)
			}
			if x, ok := Ratio(float64(b.Latency.P99), float64(r.Latency.P99)); ok {
				rp = fmt.Sprintf("%.2f×", x)
			}
		}
		errs := fmt.Sprint(r.Errors)
		rows = append(rows, []string{
			string(r.Workload), r.System, fmt.Sprintf("%.0f", r.Rate), units[r.Workload], rr,
			fmtDur(r.Latency.P50), fmtDur(r.Latency.P99), rp, errs, details(r),
		})
	}
	if markdown {
		return writeMarkdown(w, header, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func writeMarkdown(w io.Writer, header []string, rows [][]string) error {
	line := func(cells []string) string {
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		return "| " + strings.Join(cells, " | ") + " |\n"
	}
	var b strings.Builder
	b.WriteString(line(append([]string(nil), header...)))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	b.WriteString("|" + strings.Join(sep, "|") + "|\n")
	for _, r := range rows {
		b.WriteString(line(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func details(r Result) string {
	var parts []string
	if f := r.Fairness; f != nil {
		fifo := "no"
		if f.FIFO() {
			fifo = "yes"
		}
		rate := 0.0
		if r.Elapsed > 0 {
			rate = float64(f.Grants) / r.Elapsed.Seconds()
		}
		over := ""
		if f.Overtaken > 0 {
			over = fmt.Sprintf(", by up to %d later starters, up to %s later", f.MaxOvertakes, fmtDur(f.WorstGap))
		}
		parts = append(parts, fmt.Sprintf("grants/s %.0f; FIFO %s (%d of %d waits overtaken%s); longest wait %s",
			rate, fifo, f.Overtaken, f.Grants, over, fmtDur(f.LongestWait)))
		if fs := r.FairnessBySend; fs != nil {
			over := ""
			if fs.Overtaken > 0 {
				over = fmt.Sprintf(", up to %s later", fmtDur(fs.WorstGap))
			}
			parts = append(parts, fmt.Sprintf("by send time %d overtaken%s", fs.Overtaken, over))
		}
	}
	if k := r.KeepAlive; k != nil {
		what := "leases"
		if r.Workload == W5 {
			what = "sessions"
		}
		parts = append(parts, fmt.Sprintf("%d %s, offered %.0f/s; max lag %s; late (>TTL/2) %d; hold setup %s",
			k.Leases, what, k.Offered, fmtDur(k.MaxLag), k.Late, fmtDur(k.Setup)))
	}
	if u := r.Server; u != nil {
		parts = append(parts, fmt.Sprintf("server CPU %.2f cores, RSS %s", u.CPU, fmtBytes(u.RSS)))
	}
	if s := r.Scale; s != nil {
		snap := "?"
		if s.SnapshotBytes >= 0 {
			snap = fmtBytes(s.SnapshotBytes)
		}
		parts = append(parts, fmt.Sprintf("%d locks: %.0f B/lock RSS (%s → %s); snapshot %s; fill %s",
			s.Locks, s.BytesPerLock, fmtBytes(s.RSSBefore), fmtBytes(s.RSSAfter), snap, fmtDur(s.Setup)))
	}
	if r.Rounds > 1 {
		parts = append(parts, fmt.Sprintf("median of %d rounds (rate %.0f–%.0f, p99 %s–%s)", r.Rounds, r.RateMin, r.RateMax, fmtDur(r.P99Min), fmtDur(r.P99Max)))
	}
	if r.FirstError != "" {
		e := r.FirstError
		if len(e) > 120 {
			e = e[:120] + "…"
		}
		parts = append(parts, "first error: "+e)
	}
	return strings.Join(parts, "; ")
}

// fmtDur prints a latency with three significant digits in a fitting unit.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
