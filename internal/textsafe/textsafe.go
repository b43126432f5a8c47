// Package textsafe makes untrusted text safe to print on a terminal.
//
// Keys, values, dead-letter reasons and error messages come from devices
// and servers an operator does not control. Printed raw, an escape
// sequence in one retitles or clears the operator's terminal, hides the
// rows after it, or (a bidirectional override) makes a row read as
// something it is not. Escape keeps every printable character, including
// every non-ASCII letter, and writes everything else as a visible Go-style
// escape. JSON output needs none of this: its encoder escapes what it must,
// and scripts want the exact bytes.
package textsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every control character (C0, DEL, C1), every
// bidirectional formatting character and every invalid UTF-8 byte replaced
// by a visible escape: \t, \n and \r as such, others as \xHH or \uHHHH. A
// backslash is kept as is. Text without such characters is returned
// unchanged.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case unsafe(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafe(r) {
			return true
		}
		i += size
	}
	return false
}

// unsafe reports whether r may change how a terminal shows what follows.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // ALM, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	}
	return false
}
