package syncproto

import (
	"bytes"
	"testing"
)

// Wherever envelopePrefix reads a frame's envelope, the decoder reads the
// same.
func FuzzEnvelopePrefix(f *testing.F) {
	for _, seed := range []string{
		`{"type":"push","id":"r1","mutations":[]}`, `{"type":"ping","id":"r2"}`, `{"type":"push","id":"r1"x`,
		`{"type":"push","id":"r\u00311"}`, `{"type":"pu\"sh","id":"r1"}`, `{"type":"push","type":"pull","id":"r1"}`,
		`{"id":"r1","type":"push"}`, `{"type":"push" ,"id":"r1"}`, `{"type":"push","id":"r1" }`, `{"type":"é","id":""}`,
		`{"type":1,"id":"r1"}`, `{"type":"push","id":"r1",`, "{\"type\":\"p\tsh\",\"id\":\"r1\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		rawType, rawID, ok := envelopePrefix(frame)
		if !ok {
			return
		}
		wantType, wantID, err := decodeEnvelope(frame)
		if err != nil {
			t.Fatalf("%q: the prefix read %s, %s; the decoder failed: %v", frame, rawType, rawID, err)
		}
		if !bytes.Equal(rawType, wantType) || !bytes.Equal(rawID, wantID) {
			t.Fatalf("%q: the prefix read %s, %s; the decoder %s, %s", frame, rawType, rawID, wantType, wantID)
		}
	})
}
