package main

import (
	"bytes"

	"github.com/syncd-dev/syncd/internal/jsonscan"
)

// changesPrefix starts every changes frame syncd writes (type first, as
// syncproto.Encode and the feed tail write it).
var changesPrefix = []byte(`{"type":"changes"`)

// scanChanges reads what the generator needs of a changes frame (each
// entry's seq, the cursor) in one pass over its bytes, without decoding
// values: with a thousand subscribers the generator reads every entry a
// thousand times, on the machine the server runs on, and a full decode was
// most of its CPU. It calls seen for each entry's seq in order and returns
// the cursor; ok is false when data is not a changes frame it can read
// (the caller then decodes it the ordinary way).
func scanChanges(data []byte, seen func(seq uint64)) (cursor uint64, ok bool) {
	if !bytes.HasPrefix(data, changesPrefix) {
		return 0, false
	}
	var seqs []uint64
	gotCursor := false
	_, ok = jsonscan.Object(data, 0, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "entries":
			return jsonscan.Array(data, v, func(e int) (int, bool) {
				found := false
				end, ok := jsonscan.Object(data, e, func(key []byte, v int) (int, bool) {
					if string(key) != "seq" {
						end, _, ok := jsonscan.ValueEnd(data, v)
						return end, ok
					}
					n, end, ok := jsonscan.Uint(data, v)
					seqs, found = append(seqs, n), ok
					return end, ok
				})
				return end, ok && found
			})
		case "cursor":
			n, end, ok := jsonscan.Uint(data, v)
			cursor, gotCursor = n, ok
			return end, ok
		}
		end, _, ok := jsonscan.ValueEnd(data, v)
		return end, ok
	})
	if !ok || !gotCursor {
		return 0, false
	}
	for _, s := range seqs {
		seen(s)
	}
	return cursor, true
}
