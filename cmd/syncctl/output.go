package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/syncd-dev/syncd/internal/textsafe"
)

// printJSON writes v as indented JSON: the --json output of one answer.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printJSONLine writes v as one line of JSON: the --json output of a
// stream (oplog tail --follow, watch), one object per line.
func printJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// table collects rows and writes them with aligned columns. Cells are
// separated by two spaces; the last column is not padded, so a long last
// cell (a reason, a remote address) never widens the others.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cell makes s safe for one table cell and for the terminal: control
// and bidirectional characters (tabs and line breaks included) escaped
// (textsafe), "-" for empty.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return textsafe.Escape(s)
}

// fields writes name/value pairs, one per line, names aligned: the human
// output of a single object (status, ledger get, queue stats).
func fields(w io.Writer, pairs ...[2]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(tw, "%s\t%s\n", p[0], cell(p[1]))
	}
	return tw.Flush()
}

// stamp formats a time for people: UTC, to the second; "-" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// count formats n with its noun, singular or plural.
func count(n int, singular, plural string) string {
	if n == 1 {
		return "1 " + singular
	}
	return strconv.Itoa(n) + " " + plural
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// isTerminal reports whether w is a character device (a terminal), which
// decides whether progress bars are drawn.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
