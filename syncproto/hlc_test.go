package syncproto_test

import (
	"encoding/json"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// fakeTime is a settable physical clock.
type fakeTime struct {
	mu sync.Mutex
	ms int64
}

func (f *fakeTime) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.UnixMilli(f.ms)
}

func (f *fakeTime) set(ms int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ms = ms
}

func ts(wall int64, logical uint32, origin string) syncproto.Timestamp {
	return syncproto.Timestamp{Wall: wall, Logical: logical, Origin: origin}
}

func TestTimestampCompare(t *testing.T) {
	tests := []struct {
		a, b syncproto.Timestamp
		want int
	}{
		{ts(1, 0, "a"), ts(2, 0, "a"), -1},
		{ts(2, 0, "a"), ts(1, 9, "z"), 1},
		{ts(5, 1, "z"), ts(5, 2, "a"), -1},
		{ts(5, 2, "a"), ts(5, 2, "b"), -1},
		{ts(5, 2, "b"), ts(5, 2, "a"), 1},
		{ts(5, 2, "B"), ts(5, 2, "a"), -1}, // bytewise: 'B' < 'a'
		{ts(5, 2, "a"), ts(5, 2, "a"), 0},
		{syncproto.Timestamp{}, ts(0, 0, "a"), -1},
	}
	for _, tt := range tests {
		got := tt.a.Compare(tt.b)
		require.Equal(t, tt.want, got, "%v vs %v", tt.a, tt.b)
		require.Equal(t, -tt.want, tt.b.Compare(tt.a), "%v vs %v reversed", tt.b, tt.a)
	}
}

func TestTimestampText(t *testing.T) {
	good := []struct {
		text string
		want syncproto.Timestamp
	}{
		{"", syncproto.Timestamp{}},
		{"1733140000000.3.client-a", ts(1733140000000, 3, "client-a")},
		{"0.0.a", ts(0, 0, "a")},
		{"253402300799999.4294967295.n1", ts(syncproto.MaxWall, math.MaxUint32, "n1")},
		{"7.1.dev.phone:1_x-y", ts(7, 1, "dev.phone:1_x-y")}, // origin may hold dots
	}
	for _, tt := range good {
		got, err := syncproto.ParseTimestamp(tt.text)
		require.NoError(t, err, tt.text)
		require.Equal(t, tt.want, got, tt.text)
		require.Equal(t, tt.text, got.String(), "round trip")
		require.NoError(t, got.Validate())
	}
	bad := []string{
		"1", "1.2", "1.2.", ".2.a", "1..a", "01.2.a", "1.02.a", "-1.2.a", "+1.2.a",
		"1.-2.a", "1.2.a b", "1.2.é", "253402300800000.0.a", "1.4294967296.a",
		"99999999999999999999.0.a", "1.2." + string(make([]byte, 65)), "0x1.0.a", "1.2.a\n",
	}
	for _, text := range bad {
		_, err := syncproto.ParseTimestamp(text)
		require.Error(t, err, "%q", text)
		require.True(t, errors.Is(err, syncproto.ErrInvalidTimestamp), "%q: %v", text, err)
	}
}

func TestTimestampValidate(t *testing.T) {
	require.NoError(t, syncproto.Timestamp{}.Validate())
	for _, bad := range []syncproto.Timestamp{ts(-1, 0, "a"), ts(syncproto.MaxWall+1, 0, "a"), ts(1, 0, ""), ts(1, 0, "a b")} {
		err := bad.Validate()
		var pe *syncproto.Error
		require.ErrorAs(t, err, &pe, "%#v", bad)
		require.Equal(t, syncproto.CodeInvalidHLC, pe.Code)
	}
}

func TestTimestampJSON(t *testing.T) {
	type doc struct {
		H syncproto.Timestamp `json:"h"`
		Z syncproto.Timestamp `json:"z,omitzero"`
	}
	b, err := json.Marshal(doc{H: ts(1733140000000, 3, "client-a")})
	require.NoError(t, err)
	require.JSONEq(t, `{"h":"1733140000000.3.client-a"}`, string(b))

	var got doc
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, ts(1733140000000, 3, "client-a"), got.H)

	for _, bad := range []string{`{"h":12}`, `{"h":"1.2"}`, `{"h":{}}`} {
		require.Error(t, json.Unmarshal([]byte(bad), &got), bad)
	}
}

func TestClockNow(t *testing.T) {
	ft := &fakeTime{}
	steps := []struct {
		physical int64
		want     syncproto.Timestamp
	}{
		{1000, ts(1000, 0, "c1")},
		{1000, ts(1000, 1, "c1")}, // physical stands still: logical increments
		{1001, ts(1001, 0, "c1")}, // physical advances: logical resets
		{900, ts(1001, 1, "c1")},  // physical steps back: wall holds
		{1001, ts(1001, 2, "c1")},
		{2000, ts(2000, 0, "c1")},
		{-5, ts(2000, 1, "c1")}, // a pre-1970 clock is clamped, never goes back
	}
	c := syncproto.NewClock("c1", ft.now)
	require.True(t, c.Peek().IsZero())
	for i, s := range steps {
		ft.set(s.physical)
		got := c.Now()
		require.Equal(t, s.want, got, "step %d", i)
		require.Equal(t, got, c.Peek(), "step %d: Peek is the last reading", i)
	}
}

func TestClockObserve(t *testing.T) {
	tests := []struct {
		name     string
		last     int64 // physical time of a first Now, giving last = (last, 0)
		physical int64
		remote   syncproto.Timestamp
		want     syncproto.Timestamp
	}{
		{"physical ahead of both", 100, 500, ts(200, 7, "r"), ts(500, 0, "c")},
		{"remote ahead", 100, 150, ts(300, 7, "r"), ts(300, 8, "c")},
		{"local ahead", 400, 150, ts(300, 7, "r"), ts(400, 1, "c")},
		{"local and remote tie", 300, 150, ts(300, 7, "r"), ts(300, 8, "c")},
		{"tie, local logical larger", 300, 300, ts(300, 0, "r"), ts(300, 1, "c")},
		{"zero remote acts as Now", 300, 300, syncproto.Timestamp{}, ts(300, 1, "c")},
		{"remote logical exhausted", 100, 100, ts(300, math.MaxUint32, "r"), ts(301, 0, "c")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft := &fakeTime{ms: tt.last}
			c := syncproto.NewClock("c", ft.now)
			first := c.Now()
			ft.set(tt.physical)
			got := c.Observe(tt.remote)
			require.Equal(t, tt.want, got)
			require.Equal(t, 1, got.Compare(first), "after the previous reading")
			require.Equal(t, 1, got.Compare(tt.remote), "after the remote reading")
			require.Equal(t, got, c.Peek())
		})
	}
}

func TestClockLogicalOverflow(t *testing.T) {
	ft := &fakeTime{ms: 50}
	c := syncproto.NewClock("c", ft.now)
	got := c.Observe(ts(50, math.MaxUint32-1, "r"))
	require.Equal(t, ts(50, math.MaxUint32, "c"), got)
	require.Equal(t, ts(51, 0, "c"), c.Now(), "exhausted logical carries into wall")
	require.Equal(t, ts(51, 1, "c"), c.Now())
}

func TestClockAhead(t *testing.T) {
	ft := &fakeTime{ms: 10_000}
	c := syncproto.NewClock("c", ft.now)
	require.Equal(t, 5*time.Second, c.Ahead(ts(15_000, 0, "r")))
	require.Equal(t, -time.Second, c.Ahead(ts(9_000, 0, "r")))
	require.Equal(t, "c", c.Origin())
}

func TestNewClockRefusesBadOrigin(t *testing.T) {
	for _, origin := range []string{"", "has space", string(make([]byte, 65))} {
		require.Panics(t, func() { syncproto.NewClock(origin, nil) }, "%q", origin)
	}
	c := syncproto.NewClock("ok", nil)
	require.False(t, c.Now().IsZero(), "nil now defaults to time.Now")
}

// TestClockConcurrent checks the strict-increase promise under concurrent
// Now and Observe calls with a physical clock that never moves.
func TestClockConcurrent(t *testing.T) {
	ft := &fakeTime{ms: 1}
	c := syncproto.NewClock("c", ft.now)
	const workers, perWorker = 4, 500
	readings := make([][]syncproto.Timestamp, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				var r syncproto.Timestamp
				if i%3 == 0 {
					r = c.Observe(ts(1, uint32(i), "r"))
				} else {
					r = c.Now()
				}
				readings[w] = append(readings[w], r)
			}
		}()
	}
	wg.Wait()
	seen := make(map[syncproto.Timestamp]bool, workers*perWorker)
	for _, rs := range readings {
		for i, r := range rs {
			require.False(t, seen[r], "reading %v issued twice", r)
			seen[r] = true
			if i > 0 {
				require.Equal(t, 1, r.Compare(rs[i-1]), "per-goroutine readings increase")
			}
		}
	}
}

func TestClockAheadOfUnvalidatedReading(t *testing.T) {
	c := syncproto.NewClock("c", (&fakeTime{}).now)
	require.Greater(t, c.Ahead(ts(math.MaxInt64, 0, "r")), 200*365*24*time.Hour, "no overflow to negative")
	require.Less(t, c.Ahead(ts(math.MinInt64, 0, "r")), time.Duration(0))
}
