package report_test

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/soak/checker"
	"github.com/syncd-dev/syncd/soak/report"
)

func data() report.Data {
	return report.Data{
		Title: "syncd soak test", Hypothesis: "nothing is lost",
		Summary: []report.Row{{Name: "writes made", Value: "12 (lww 12)"}, {Name: "pipe", Value: "a|b"}},
		Verdicts: []checker.Verdict{
			{Invariant: checker.Accounted, Holds: true, Checked: 12},
			{Invariant: checker.ExactlyOnce, Checked: 40, Violations: 10, Evidence: []string{"op x appears 2 times"}},
		},
		Coverage: []report.Coverage{{Kind: "blackhole", Count: 3, Required: 1}, {Kind: "network flaps, all kinds", Count: 3, Required: 300}},
		Depth: []report.DepthSample{
			{At: time.Second, Pending: 4, MaxPending: 3, DeadLetters: 0},
			{At: 2 * time.Second, Pending: 40, MaxPending: 30, DeadLetters: 2},
			{At: 3 * time.Second, Pending: 0, DeadLetters: 2},
		},
		Markers: []report.Marker{{At: 1500 * time.Millisecond, Label: "kill <&>"}},
		Health:  []string{"client c01 exited on its own"},
	}
}

func TestMarkdown(t *testing.T) {
	md := report.Markdown(data())
	assert.True(t, strings.HasPrefix(md, "# syncd soak test: FAIL\n"))
	assert.Contains(t, md, "| 2 | applied exactly once | **VIOLATED** | 40 | 10 |")
	assert.Contains(t, md, "- op x appears 2 times\n- ... and 9 more")
	assert.Contains(t, md, "| network flaps, all kinds | 3 | 300 | **no** |")
	assert.Contains(t, md, `| pipe | a\|b |`, "pipes in cells are escaped")
	assert.Contains(t, md, "peak 40 pending writes at 2s")
	assert.Contains(t, md, "- client c01 exited on its own")
	assert.Contains(t, md, "](queue-depth.svg)")
}

func TestDepthSVGIsWellFormed(t *testing.T) {
	for name, d := range map[string]report.Data{"samples": data(), "empty": {}} {
		svg := report.DepthSVG(d.Depth, d.Markers)
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, name)
		}
		assert.Contains(t, svg, "<svg", name)
	}
	assert.Contains(t, report.DepthSVG(data().Depth, data().Markers), "kill &lt;&amp;&gt;", "labels are escaped")
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path, err := report.Write(dir, data())
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, report.MarkdownFile), path)
	assert.FileExists(t, filepath.Join(dir, report.DepthFile))
	md, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, report.Markdown(data()), string(md))
}
