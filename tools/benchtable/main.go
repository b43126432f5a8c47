// Command benchtable turns `go test -bench` output (on stdin) into a Markdown
// table: one row per benchmark, one column per metric unit it reported.
// Benchmarks in this repository report their rate, the ceiling they were
// measured against in the same run, and the ratio, so the table reads as
// "what we get, what the hardware allows, how close we are".
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// row is one benchmark result line.
type row struct {
	pkg, name string
	metrics   map[string]string
}

// gomaxprocsSuffix is the "-N" go test appends to benchmark names.
var gomaxprocsSuffix = regexp.MustCompile(`-\d+$`)

// hiddenUnits are standard units left out of the table to keep it readable.
var hiddenUnits = map[string]bool{"B/op": true, "allocs/op": true}

func run(in io.Reader, out io.Writer) error {
	var rows []row
	var units []string
	seen := map[string]bool{}
	pkg := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = p
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		r := row{pkg: pkg, name: gomaxprocsSuffix.ReplaceAllString(f[0], ""), metrics: map[string]string{}}
		for i := 2; i+1 < len(f); i += 2 {
			unit := f[i+1]
			if hiddenUnits[unit] {
				continue
			}
			r.metrics[unit] = f[i]
			if !seen[unit] {
				seen[unit] = true
				units = append(units, unit)
			}
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(rows) == 0 {
		return fmt.Errorf("no benchmark results on stdin")
	}
	fmt.Fprintf(out, "| package | benchmark | %s |\n", strings.Join(units, " | "))
	fmt.Fprintf(out, "|---|---|%s\n", strings.Repeat("---:|", len(units)))
	for _, r := range rows {
		cells := make([]string, len(units))
		for i, u := range units {
			cells[i] = r.metrics[u]
		}
		fmt.Fprintf(out, "| %s | %s | %s |\n", strings.TrimPrefix(r.pkg, "github.com/syncd-dev/syncd/"), r.name, strings.Join(cells, " | "))
	}
	return nil
}
