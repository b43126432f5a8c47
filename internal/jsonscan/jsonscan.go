// Package jsonscan walks JSON text without decoding it: an object member by
// member, an array element by element, the extent of any value. It checks
// the structure it walks (brackets, quotes, separators) and nothing inside
// what it skips; a caller that keeps a value validates it. It is what the
// protocol's fast readers (syncproto) and the load generator (syncctl bench)
// stand on, where encoding/json's reflection cost most of their time.
//
// Every function takes the text and an index into it and reports the index
// past what it read; ok is false when the text there is not what it reads.
package jsonscan

import (
	"bytes"
	"strconv"
)

// Object calls member for each member of the object starting at b[i], with
// the member's key (its bytes between the quotes, escapes as written) and
// the index of its value; member returns the index past the value. Object
// returns the index past the object.
func Object(b []byte, i int, member func(key []byte, v int) (int, bool)) (int, bool) {
	return container(b, i, '{', '}', func(i int) (int, bool) {
		end, ok := StringEnd(b, i)
		if !ok {
			return 0, false
		}
		key := b[i+1 : end-1]
		i = SkipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		return member(key, SkipSpace(b, i+1))
	})
}

// Array calls elem for each element of the array starting at b[i]; elem
// returns the index past the element. Array returns the index past the
// array.
func Array(b []byte, i int, elem func(e int) (int, bool)) (int, bool) {
	return container(b, i, '[', ']', elem)
}

// container reads the object or array opened by opening at b[i], calling item
// at each member or element, items separated by commas, up to closing.
func container(b []byte, i int, opening, closing byte, item func(i int) (int, bool)) (int, bool) {
	if i >= len(b) || b[i] != opening {
		return 0, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = item(i); !ok {
			return 0, false
		}
		i = SkipSpace(b, i)
		switch {
		case i >= len(b):
			return 0, false
		case b[i] == ',':
			i = SkipSpace(b, i+1)
		case b[i] == closing:
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// ValueEnd returns the index past the value starting at b[i], found by
// brackets and quotes alone, and how deeply it nests arrays and objects (0
// for a scalar).
func ValueEnd(b []byte, i int) (end, depth int, ok bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	switch b[i] {
	case '"':
		end, ok := StringEnd(b, i)
		return end, 0, ok
	case '{', '[':
		open, deepest := 0, 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := StringEnd(b, i)
				if !ok {
					return 0, 0, false
				}
				i = end
				continue
			case '{', '[':
				open++
				deepest = max(deepest, open)
			case '}', ']':
				open--
				if open == 0 {
					return i + 1, deepest, true
				}
			}
			i++
		}
		return 0, 0, false
	}
	end = i
	for end < len(b) && !Delimiter(b[end]) {
		end++
	}
	return end, 0, end > i
}

// StringEnd returns the index past the string starting at b[i]: past the
// first quote not escaped by an odd run of backslashes. Quotes are found
// with bytes.IndexByte, so a long string costs little to skip.
func StringEnd(b []byte, i int) (int, bool) {
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
		for j := i - 1; b[j] == '\\'; j-- { // stops at the opening quote at the latest
			escapes++
		}
		if escapes%2 == 0 {
			return i + 1, true
		}
	}
}

// Uint reads the unsigned integer starting at b[i], written plainly: no
// sign, fraction, exponent or leading zero, within uint64, followed by a
// delimiter or the end of b.
func Uint(b []byte, i int) (uint64, int, bool) {
	end := i
	for end < len(b) && '0' <= b[end] && b[end] <= '9' {
		end++
	}
	if end == i || (b[i] == '0' && end > i+1) || (end < len(b) && !Delimiter(b[end])) {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(string(b[i:end]), 10, 64)
	return v, end, err == nil
}

// SkipSpace returns the index of the first byte at or after b[i] that is
// not JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && space(b[i]) {
		i++
	}
	return i
}

// Delimiter reports whether c ends a number or literal: a separator, a
// closing bracket or whitespace.
func Delimiter(c byte) bool { return c == ',' || c == '}' || c == ']' || space(c) }

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
