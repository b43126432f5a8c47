package syncproto

import (
	"cmp"
	"slices"
)

// omittedMemberBytes is what ValueOmitted adds to a winner's encoding,
// `,"value_omitted":true`, less the `"value":,` that leaving the value out
// removes; a bound on the net cost of omitting one value beyond its bytes.
const omittedMemberBytes = len(`,"value_omitted":true`) - len(`"value":,`)

// EncodePushResult encodes m like Encode, into a frame of at most
// maxFrameBytes (the max_frame_bytes the server announced, at most
// MaxFrameBytes). When the winners' values make the answer larger, the
// largest values are left out first (Winner.ValueOmitted) until it fits;
// omitted counts them. m is not modified: the returned frame encodes a
// copy.
//
// Every push_result fits once its winner values are left out: a result
// without a value holds at most an op id, a status, a code, a message of
// MaxMessageBytes and a winner's version and hlc, and MaxBatch of them
// take well under MaxFrameBytes. The error is Encode's for an invalid
// message, or CodeFrameTooLarge for a maxFrameBytes too small for that.
func EncodePushResult(m *PushResult, maxFrameBytes int) (frame []byte, omitted int, err error) {
	maxFrameBytes = min(maxFrameBytes, MaxFrameBytes)
	frame, err = encodeUnbounded(m)
	if err != nil {
		return nil, 0, err
	}
	if len(frame) <= maxFrameBytes {
		return frame, 0, nil
	}
	// Winners with a value, largest first.
	var order []int
	for i, r := range m.Results {
		if r.Winner != nil && len(r.Winner.Value) > 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(len(m.Results[b].Winner.Value), len(m.Results[a].Winner.Value))
	})
	fitted := &PushResult{ID: m.ID, Results: slices.Clone(m.Results)}
	excess := len(frame) - maxFrameBytes
	for _, i := range order {
		w := *fitted.Results[i].Winner
		excess -= len(w.Value) - omittedMemberBytes
		w.Value, w.ValueOmitted = nil, true
		fitted.Results[i].Winner = &w
		omitted++
		if excess > 0 {
			continue
		}
		// The estimate says it fits; the encoding decides.
		if frame, err = encodeUnbounded(fitted); err != nil {
			return nil, 0, err
		}
		if excess = len(frame) - maxFrameBytes; excess <= 0 {
			return frame, omitted, nil
		}
	}
	return nil, 0, frameTooLarge(m.Type(), len(frame), maxFrameBytes)
}
