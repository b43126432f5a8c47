package syncproto_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/syncd-dev/syncd/syncproto"
)

// pushFrame returns the frame of a push of n typical mutations.
func pushFrame(b *testing.B, n int) []byte {
	b.Helper()
	p := &syncproto.Push{ID: "p1", Mutations: make([]syncproto.Mutation, n)}
	for i := range p.Mutations {
		id, err := syncproto.NewOpID()
		if err != nil {
			b.Fatal(err)
		}
		p.Mutations[i] = syncproto.Mutation{OpID: id, Model: "todos", Key: fmt.Sprintf("user-42/todo-%06d", i), Op: syncproto.OpPut,
			Value: json.RawMessage(`{"title":"buy milk and bread","done":false,"tags":["home","errand"],"prio":3}`), HLC: ts(1733140000000, uint32(i), "client-a")}
	}
	frame, err := syncproto.Encode(p)
	if err != nil {
		b.Fatal(err)
	}
	return frame
}

// BenchmarkDecodePush measures what the server spends decoding and
// validating a push before touching storage.
func BenchmarkDecodePush(b *testing.B) {
	for _, n := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			frame := pushFrame(b, n)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				msg, err := syncproto.DecodeRequest(frame)
				if err != nil {
					b.Fatal(err)
				}
				for i := range msg.(*syncproto.Push).Mutations {
					m := &msg.(*syncproto.Push).Mutations[i]
					if err := m.Validate(); err != nil {
						b.Fatal(err)
					}
					_ = m.Digest()
				}
			}
		})
	}
}

// BenchmarkDecodeChanges measures what a device spends decoding a feed
// page of n changes.
func BenchmarkDecodeChanges(b *testing.B) {
	for _, n := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			c := &syncproto.Changes{ID: "feed", Entries: make([]syncproto.Change, n), Cursor: uint64(n), Head: uint64(n)}
			for i := range c.Entries {
				id, err := syncproto.NewOpID()
				if err != nil {
					b.Fatal(err)
				}
				c.Entries[i] = syncproto.Change{Seq: uint64(i + 1), OpID: id, Model: "todos", Key: fmt.Sprintf("user-42/todo-%06d", i), Op: syncproto.OpPut,
					Value: json.RawMessage(`{"title":"buy milk and bread","done":false,"tags":["home","errand"],"prio":3}`), Version: 1, HLC: ts(1733140000000, uint32(i), "client-a")}
			}
			frame, err := syncproto.Encode(c)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := syncproto.Decode(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkClockNow measures issuing one timestamp.
func BenchmarkClockNow(b *testing.B) {
	c := syncproto.NewClock("client-a", nil)
	for b.Loop() {
		_ = c.Now()
	}
}
