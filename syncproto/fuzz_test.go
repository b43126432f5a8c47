package syncproto_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncd-dev/syncd/syncproto"
)

// goldenFrames returns every frame in testdata, as fuzz seeds.
func goldenFrames(f *testing.F) [][]byte {
	f.Helper()
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		f.Fatal(err)
	}
	var frames [][]byte
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "> ") {
				frames = append(frames, []byte(strings.TrimPrefix(line, "> ")))
			}
		}
	}
	return frames
}

// FuzzDecode checks that Decode never panics, that every refusal is an
// *Error, and that a decoded message re-encodes to a frame that decodes to
// the same message and encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, msg := range sampleMessages() {
		frame, err := syncproto.Encode(msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame)
	}
	for _, frame := range goldenFrames(f) {
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		msg, err := syncproto.Decode(frame)
		if err != nil {
			var pe *syncproto.Error
			if !errors.As(err, &pe) {
				t.Fatalf("refusal is not an *Error: %v", err)
			}
			if verr := pe.Validate(); verr != nil {
				t.Fatalf("refusal %v cannot be sent: %v", pe, verr)
			}
			return
		}
		if p, ok := msg.(*syncproto.Push); ok {
			for i := range p.Mutations {
				if verr := p.Mutations[i].Validate(); verr != nil {
					var pe *syncproto.Error
					if !errors.As(verr, &pe) {
						t.Fatalf("mutation refusal is not an *Error: %v", verr)
					}
				}
				_ = p.Mutations[i].Digest()
			}
		}
		first, err := syncproto.Encode(msg)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", msg.Type(), err)
		}
		again, err := syncproto.Decode(first)
		if err != nil {
			t.Fatalf("re-encoded frame %s does not decode: %v", first, err)
		}
		second, err := syncproto.Encode(again)
		if err != nil {
			t.Fatalf("second encoding failed: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("encoding is not stable:\n%s\n%s", first, second)
		}
		third, err := syncproto.Decode(second)
		if err != nil {
			t.Fatalf("third decoding failed: %v", err)
		}
		if !equalJSON(t, again, third) {
			t.Fatalf("decoding is not stable: %#v vs %#v", again, third)
		}
	})
}

// equalJSON compares two messages field by field through their Go JSON
// form (the messages hold only exported, JSON-visible state once decoded
// from a canonical frame).
func equalJSON(t *testing.T, a, b syncproto.Message) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return a.Type() == b.Type() && bytes.Equal(ja, jb)
}

// FuzzParseTimestamp checks that ParseTimestamp never panics and that what
// it accepts prints back byte for byte and survives JSON.
func FuzzParseTimestamp(f *testing.F) {
	for _, s := range []string{"", "1733140000000.3.client-a", "0.0.a", "253402300799999.4294967295.n", "1.2.a.b", "01.2.a", "1.2.", "-1.0.a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := syncproto.ParseTimestamp(s)
		if err != nil {
			if !errors.Is(err, syncproto.ErrInvalidTimestamp) {
				t.Fatalf("error does not wrap ErrInvalidTimestamp: %v", err)
			}
			return
		}
		if got := ts.String(); got != s {
			t.Fatalf("String() = %q, parsed from %q", got, s)
		}
		if err := ts.Validate(); err != nil {
			t.Fatalf("parsed %q but invalid: %v", s, err)
		}
		if ts.Compare(ts) != 0 {
			t.Fatalf("%v does not equal itself", ts)
		}
		b, err := json.Marshal(ts)
		if err != nil {
			t.Fatal(err)
		}
		var back syncproto.Timestamp
		if err := json.Unmarshal(b, &back); err != nil || back != ts {
			t.Fatalf("JSON round trip of %v: %v, %v", ts, back, err)
		}
	})
}

// FuzzSnapshotReader checks that reading any body never panics, and that a
// body read to the end rewrites to one that reads the same.
func FuzzSnapshotReader(f *testing.F) {
	f.Add([]byte("{\"head\":3}\n{\"model\":\"m\",\"key\":\"k\",\"value\":1,\"version\":1,\"hlc\":\"1.0.c\",\"deleted\":false}\n{\"end\":true,\"records\":1}\n"))
	f.Add([]byte("{\"head\":0}\n{\"end\":true,\"records\":0}\n"))
	f.Add([]byte("{\"head\":3}\n{\"end\":true,\"records\":2}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		head, recs, err := readSnapshot(body)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		w, err := syncproto.NewSnapshotWriter(&buf, head)
		if err != nil {
			t.Fatalf("head %d read but not writable: %v", head, err)
		}
		for _, r := range recs {
			if err := w.Write(r); err != nil {
				t.Fatalf("record read but not writable: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		head2, recs2, err := readSnapshot(buf.Bytes())
		if err != nil || head2 != head || len(recs2) != len(recs) {
			t.Fatalf("rewritten snapshot reads differently: %v", err)
		}
	})
}

// FuzzSnapshotRecordEncoding checks that the SnapshotWriter's own encoder
// writes any record it accepts (a valid JSON value, a valid key) byte for
// byte as encoding/json does.
func FuzzSnapshotRecordEncoding(f *testing.F) {
	f.Add("k", []byte(`{"a": [1, "x y"]}`))
	f.Add("é\"\\\u2028", []byte("\"\u2028 \\n\" "))
	f.Add("<&>", []byte(" [ ] "))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if !json.Valid(value) {
			return
		}
		rec := syncproto.SnapshotRecord{Model: "m", Key: key, Value: value, Version: 1, HLC: syncproto.Timestamp{Wall: 1, Origin: "c"}}
		if rec.Validate() != nil {
			return
		}
		var buf bytes.Buffer
		w, err := syncproto.NewSnapshotWriter(&buf, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(rec); err != nil {
			t.Fatalf("valid record refused: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(buf.String(), "\n")
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(rec); err != nil {
			t.Fatal(err)
		}
		if lines[1] != want.String() {
			t.Fatalf("wrote %q, encoding/json writes %q", lines[1], want.String())
		}
	})
}
