package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// progressMode is the --progress flag: auto draws a bar only when stderr is
// a terminal, so piped and captured output stays quiet.
type progressMode string

const (
	progressAuto   progressMode = "auto"
	progressAlways progressMode = "always"
	progressNever  progressMode = "never"
)

func (m *progressMode) String() string { return string(*m) }
func (m *progressMode) Type() string   { return "auto|always|never" }
func (m *progressMode) Set(v string) error {
	switch progressMode(v) {
	case progressAuto, progressAlways, progressNever:
		*m = progressMode(v)
		return nil
	}
	return fmt.Errorf("want auto, always or never, got %q", v)
}

var _ pflag.Value = (*progressMode)(nil)

// progressBarWidth is the number of cells of the bar.
const progressBarWidth = 30

// progress draws one bar on a line of its own, redrawn in place:
//
//	requeue [##########--------------------]  33000/100000  33%
//
// A disabled progress draws nothing. It is not safe for concurrent use.
type progress struct {
	w     io.Writer // nil: disabled
	label string
	total int
	drawn bool
}

// newProgress returns a bar on stderr when mode (and, for auto, the
// terminal) allows it.
func (a *app) newProgress(mode progressMode, label string, total int) *progress {
	p := &progress{label: label, total: total}
	if mode == progressAlways || (mode == progressAuto && a.isTerminal(a.stderr)) {
		p.w = a.stderr
	}
	return p
}

// set redraws the bar at done of total.
func (p *progress) set(done int) {
	if p.w == nil {
		return
	}
	pct := 100
	if p.total > 0 {
		pct = min(100, done*100/p.total)
	}
	filled := pct * progressBarWidth / 100
	bar := strings.Repeat("#", filled) + strings.Repeat("-", progressBarWidth-filled)
	fmt.Fprintf(p.w, "\r%s [%s] %*d/%d %3d%%", p.label, bar, len(fmt.Sprint(p.total)), done, p.total, pct)
	p.drawn = true
}

// end finishes the bar's line, so the next message starts on its own.
func (p *progress) end() {
	if p.w != nil && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
