package syncproto_test

import (
	"bufio"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

var update = flag.Bool("update", false, "rewrite the expectations in testdata/*.txt")

// TestGolden runs the transcripts in testdata: each case is a line "> frame"
// followed by a line "= outcome", where outcome is what decoding the frame
// gives (see describeOutcome). Files named requests*.txt are decoded as a
// server does (DecodeRequest), the others with Decode. Lines starting with #
// and blank lines are comments. With -update the outcomes are rewritten.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			decode := syncproto.Decode
			if strings.HasPrefix(filepath.Base(file), "requests") {
				decode = syncproto.DecodeRequest
			}
			runGolden(t, file, decode)
		})
	}
}

func runGolden(t *testing.T, file string, decode func([]byte) (syncproto.Message, error)) {
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	var frame string
	haveFrame := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "> "):
			require.False(t, haveFrame, "%s:%d: frame without outcome before it", file, n)
			frame, haveFrame = strings.TrimPrefix(line, "> "), true
			out = append(out, line)
		case strings.HasPrefix(line, "= "):
			require.True(t, haveFrame, "%s:%d: outcome without a frame", file, n)
			got := describeOutcome(decode([]byte(frame)))
			if !*update {
				require.Equal(t, strings.TrimPrefix(line, "= "), got, "%s:%d: frame %s", file, n, frame)
			}
			out = append(out, "= "+got)
			haveFrame = false
		default:
			out = append(out, line)
		}
	}
	require.NoError(t, sc.Err())
	require.False(t, haveFrame, "%s: last frame has no outcome", file)
	if *update {
		require.NoError(t, os.WriteFile(file, []byte(strings.Join(out, "\n")+"\n"), 0o644))
	}
}

// describeOutcome renders a decoding outcome:
//
//	ok <type> id=<id>                           a valid message
//	ok push id=<id> [ok <code> ...]             a push, with each mutation's Validate outcome
//	error <code> id=<id> retryable=<bool>       a refusal (id as echoed)
func describeOutcome(msg syncproto.Message, err error) string {
	if err != nil {
		pe, ok := err.(*syncproto.Error)
		if !ok {
			return "non-protocol error: " + err.Error()
		}
		return "error " + string(pe.Code) + " id=" + pe.ID + " retryable=" + boolText(pe.Retryable)
	}
	s := "ok " + string(msg.Type()) + " id=" + msg.RequestID()
	if p, ok := msg.(*syncproto.Push); ok {
		codes := make([]string, len(p.Mutations))
		for i := range p.Mutations {
			codes[i] = "ok"
			if err := p.Mutations[i].Validate(); err != nil {
				codes[i] = string(err.(*syncproto.Error).Code)
			}
		}
		s += " [" + strings.Join(codes, " ") + "]"
	}
	return s
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
