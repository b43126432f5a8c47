package jsonscan_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/jsonscan"
)

func TestValueEndFindsEveryKindOfValue(t *testing.T) {
	for _, c := range []struct {
		text       string
		end, depth int // end -1: not readable
	}{
		{`"a \" ] } \\"x`, 13, 0},
		{`{"a":[1,{"b":"}]"}],"c":{}} tail`, 27, 3},
		{`[[[]]],`, 6, 3},
		{`-1.5e3,`, 6, 0},
		{`true}`, 4, 0},
		{`null`, 4, 0},
		{`"open`, -1, 0},
		{`{"a":[1}`, -1, 0},
		{`,`, -1, 0},
		{``, -1, 0},
	} {
		end, depth, ok := jsonscan.ValueEnd([]byte(c.text), 0)
		if c.end < 0 {
			require.False(t, ok, c.text)
			continue
		}
		require.True(t, ok, c.text)
		require.Equal(t, c.end, end, c.text)
		require.Equal(t, c.depth, depth, c.text)
	}
}

func TestObjectAndArrayWalkMembersAndElements(t *testing.T) {
	text := []byte(` { "a" : [ 1 , "x" , {} ] , "b\"c" : null } rest`)
	var keys []string
	var elems []string
	end, ok := jsonscan.Object(text, jsonscan.SkipSpace(text, 0), func(key []byte, v int) (int, bool) {
		keys = append(keys, string(key))
		if string(key) != "a" {
			end, _, ok := jsonscan.ValueEnd(text, v)
			return end, ok
		}
		return jsonscan.Array(text, v, func(e int) (int, bool) {
			end, _, ok := jsonscan.ValueEnd(text, e)
			elems = append(elems, string(text[e:end]))
			return end, ok
		})
	})
	require.True(t, ok)
	require.Equal(t, " rest", string(text[end:]))
	require.Equal(t, []string{"a", `b\"c`}, keys)
	require.Equal(t, []string{"1", `"x"`, "{}"}, elems)

	for _, bad := range []string{`{"a" 1}`, `{"a":1 "b":2}`, `{"a":1,}`, `{a:1}`, `[1 2]`, `[1,]`, `{"a":1`} {
		skip := func(_ []byte, v int) (int, bool) { end, _, ok := jsonscan.ValueEnd([]byte(bad), v); return end, ok }
		elem := func(e int) (int, bool) { end, _, ok := jsonscan.ValueEnd([]byte(bad), e); return end, ok }
		_, okObject := jsonscan.Object([]byte(bad), 0, skip)
		_, okArray := jsonscan.Array([]byte(bad), 0, elem)
		require.False(t, okObject || okArray, bad)
	}
}
