package netmonitor

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDetector runs probe-result scripts through the decision core. Each
// script character is one probe: '+' success, '-' failure. The transcript
// has one entry per probe: the decision made ("online#1", "offline#2") or
// "." for none, followed by the wait the loop would choose ("i" for the full
// interval, "c" for the confirm interval, "o" for the offline interval).
func TestDetector(t *testing.T) {
	tests := []struct {
		name           string
		fail, succ     int
		script         string
		wantTranscript string
	}{
		{"first success decides online", 2, 2, "+", "online#1 i"},
		{"first failure decides offline", 2, 2, "-", "offline#1 o"},
		{"one failure is a blip", 2, 2, "+-+-+", "online#1 i, . c, . i, . c, . i"},
		{"failure threshold", 2, 2, "+--", "online#1 i, . c, offline#2 o"},
		{"success threshold", 2, 2, "--++", "offline#1 o, . o, . o, online#2 i"},
		{"success resets failure streak", 3, 2, "+--+--", "online#1 i, . c, . c, . i, . c, . c"},
		{"thresholds of one flip at once", 1, 1, "+-+", "online#1 i, offline#2 o, online#3 i"},
		{"asymmetric thresholds", 1, 3, "+-++-+++", "online#1 i, offline#2 o, . o, . o, . o, . o, . o, online#3 i"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := detector{failureThreshold: tt.fail, successThreshold: tt.succ}
			probeErr := errors.New("unreachable")
			var got []string
			for _, r := range tt.script {
				var err error
				if r == '-' {
					err = probeErr
				}
				entry := "."
				if ev, changed := d.observe(err); changed {
					entry = ev.State.String() + "#" + string(rune('0'+ev.Seq))
					require.Equal(t, ev.State == Offline, ev.Err != nil, "Err is set exactly when Offline: %+v", ev)
				}
				wait := map[time.Duration]string{5 * time.Second: "i", time.Second: "c", 300 * time.Millisecond: "o"}[d.next(5*time.Second, time.Second, func() time.Duration { return 300 * time.Millisecond })]
				got = append(got, entry+" "+wait)
			}
			require.Equal(t, tt.wantTranscript, strings.Join(got, ", "))
		})
	}
}
