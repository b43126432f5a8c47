// Package report writes a soak run's report: a Markdown file with the
// summary, every invariant's verdict and its evidence, the fault coverage,
// the harness's own health and the configuration, and beside it an SVG plot
// of the clients' queue depth over time. It renders what it is given and
// decides nothing.
package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/soak/checker"
)

// File names inside a run directory.
const (
	MarkdownFile = "report.md"
	DepthFile    = "queue-depth.svg"
)

// Data is everything a report shows.
type Data struct {
	Title      string
	Passed     bool
	Hypothesis string
	Summary    []Row
	Verdicts   []checker.Verdict
	Coverage   []Coverage
	// Health lists the harness's own findings: processes that exited on
	// their own, failed clean stops, race reports. Any makes a run fail.
	Health  []string
	Config  []Row
	Depth   []DepthSample
	Markers []Marker
	Files   []Row
}

// Row is a name and a value.
type Row struct{ Name, Value string }

// Coverage is how often a fault kind was injected, against what the run
// required.
type Coverage struct {
	Kind     string
	Count    int
	Required int
}

// OK reports whether the requirement was met.
func (c Coverage) OK() bool { return c.Count >= c.Required }

// DepthSample is one sample of the clients' queues.
type DepthSample struct {
	At          time.Duration // since the run started
	Pending     int           // pending writes, summed over clients
	MaxPending  int           // the deepest single queue
	DeadLetters int           // dead letters, summed over clients
}

// Marker is a moment drawn on the plot (a syncd kill or restart).
type Marker struct {
	At    time.Duration
	Label string
}

// Write writes report.md and queue-depth.svg into dir and returns the
// Markdown file's path.
func Write(dir string, d Data) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, DepthFile), []byte(DepthSVG(d.Depth, d.Markers)), 0o644); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	path := filepath.Join(dir, MarkdownFile)
	if err := os.WriteFile(path, []byte(Markdown(d)), 0o644); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	return path, nil
}

// Markdown renders the report.
func Markdown(d Data) string {
	var b strings.Builder
	verdict := "FAIL"
	if d.Passed {
		verdict = "PASS"
	}
	fmt.Fprintf(&b, "# %s: %s\n\n", d.Title, verdict)
	if d.Hypothesis != "" {
		fmt.Fprintf(&b, "Steady-state hypothesis: %s\n\n", d.Hypothesis)
	}
	b.WriteString("## Summary\n\n")
	table(&b, []string{"", ""}, rows(d.Summary))

	b.WriteString("\n## Invariants\n\n")
	var vr [][]string
	for _, v := range d.Verdicts {
		mark := "holds"
		if !v.Holds {
			mark = "**VIOLATED**"
		}
		vr = append(vr, []string{fmt.Sprint(int(v.Invariant)), v.Invariant.String(), mark, fmt.Sprint(v.Checked), fmt.Sprint(v.Violations)})
	}
	table(&b, []string{"#", "invariant", "verdict", "checked", "violations"}, vr)
	for _, v := range d.Verdicts {
		if len(v.Evidence) == 0 && len(v.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %d. %s\n\n", int(v.Invariant), v.Invariant.String())
		for _, n := range v.Notes {
			fmt.Fprintf(&b, "- note: %s\n", n)
		}
		for _, e := range v.Evidence {
			fmt.Fprintf(&b, "- %s\n", e)
		}
		if v.Violations > len(v.Evidence) {
			fmt.Fprintf(&b, "- ... and %d more\n", v.Violations-len(v.Evidence))
		}
	}

	b.WriteString("\n## Fault coverage\n\n")
	var cr [][]string
	for _, c := range d.Coverage {
		ok := "yes"
		if !c.OK() {
			ok = "**no**"
		}
		cr = append(cr, []string{c.Kind, fmt.Sprint(c.Count), fmt.Sprint(c.Required), ok})
	}
	table(&b, []string{"fault", "injected", "required", "met"}, cr)

	b.WriteString("\n## Queue depth\n\n")
	fmt.Fprintf(&b, "![pending writes over time](%s)\n\n", DepthFile)
	if len(d.Depth) > 0 {
		peak := DepthSample{}
		for _, s := range d.Depth {
			if s.Pending > peak.Pending {
				peak = s
			}
		}
		last := d.Depth[len(d.Depth)-1]
		fmt.Fprintf(&b, "%d samples; peak %d pending writes at %v; at the end %d pending and %d dead letters.\n",
			len(d.Depth), peak.Pending, peak.At.Round(time.Second), last.Pending, last.DeadLetters)
	}

	b.WriteString("\n## Harness health\n\n")
	if len(d.Health) == 0 {
		b.WriteString("No process exited on its own, every clean stop was clean, no race was reported.\n")
	}
	for _, h := range d.Health {
		fmt.Fprintf(&b, "- %s\n", h)
	}

	b.WriteString("\n## Configuration\n\n")
	table(&b, []string{"setting", "value"}, rows(d.Config))
	if len(d.Files) > 0 {
		b.WriteString("\n## Files in this directory\n\n")
		table(&b, []string{"file", "what"}, rows(d.Files))
	}
	return b.String()
}

func rows(rs []Row) [][]string {
	out := make([][]string, len(rs))
	for i, r := range rs {
		out[i] = []string{r.Name, r.Value}
	}
	return out
}

// table writes a Markdown table; cells have their pipes escaped.
func table(b *strings.Builder, head []string, body [][]string) {
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			fmt.Fprintf(b, " %s |", strings.ReplaceAll(c, "|", `\|`))
		}
		b.WriteString("\n")
	}
	line(head)
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range body {
		line(r)
	}
}
