package textsafe_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/textsafe"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, café, 日本, emoji 😀": "plain text, café, 日本, emoji 😀",
		"\x1b]0;pwned\x07":              `\x1b]0;pwned\x07`,
		"\x1b[2J\x1b[H":                 `\x1b[2J\x1b[H`,
		"line\nbreak\rcarriage\ttab":    `line\nbreak\rcarriage\ttab`,
		"invoice\u202efdp.exe":          `invoice\u202efdp.exe`,
		"isolate\u2066x\u2069":          `isolate\u2066x\u2069`,
		"c1 \u009b31m":                  `c1 \x9b31m`,
		"del\x7f":                       `del\x7f`,
		"bad \xff\xfe utf-8":            `bad \xff\xfe utf-8`,
		`back\slash`:                    `back\slash`,
		"":                              "",
	} {
		require.Equal(t, want, textsafe.Escape(in), "%q", in)
	}
}
