package main

import (
	"bytes"
	"strconv"
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
	_, ok = eachMember(data, 0, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "entries":
			return eachElement(data, v, func(e int) (int, bool) {
				found := false
				end, ok := eachMember(data, e, func(key []byte, v int) (int, bool) {
					if string(key) != "seq" {
						return skipValue(data, v)
					}
					n, end, ok := number(data, v)
					seqs, found = append(seqs, n), ok
					return end, ok
				})
				return end, ok && found
			})
		case "cursor":
			n, end, ok := number(data, v)
			cursor, gotCursor = n, ok
			return end, ok
		}
		return skipValue(data, v)
	})
	if !ok || !gotCursor {
		return 0, false
	}
	for _, s := range seqs {
		seen(s)
	}
	return cursor, true
}

// eachMember calls member for each member of the object starting at i
// (after whitespace) with its key and the index of its value; member
// returns the index past the value. It returns the index past the object.
func eachMember(b []byte, i int, member func(key []byte, v int) (int, bool)) (int, bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		end, ok := skipString(b, i)
		if !ok {
			return 0, false
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i, ok = member(key, skipSpace(b, i+1)); !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// eachElement calls elem for each element of the array starting at i;
// elem returns the index past the element. It returns the index past the
// array.
func eachElement(b []byte, i int, elem func(e int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != '[' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = elem(i); !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// skipValue returns the index past the JSON value starting at i.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	// A number, true, false or null: up to the next delimiter.
	start := i
	for i < len(b) && !delimiter(b[i]) {
		i++
	}
	return i, i > start
}

// skipString returns the index past the JSON string starting at i. It
// jumps from quote to quote (bytes.IndexByte is vectorized): a quote ends
// the string unless an odd run of backslashes precedes it.
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for i++; ; i++ {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return 0, false
		}
		i += q
		escapes := 0
		for j := i - 1; b[j] == '\\'; j-- {
			escapes++
		}
		if escapes%2 == 0 {
			return i + 1, true
		}
	}
}

// number reads the unsigned integer starting at i.
func number(b []byte, i int) (uint64, int, bool) {
	end := i
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	n, err := strconv.ParseUint(string(b[i:end]), 10, 64)
	return n, end, err == nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && space(b[i]) {
		i++
	}
	return i
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func delimiter(c byte) bool { return c == ',' || c == '}' || c == ']' || space(c) }
