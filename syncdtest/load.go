package syncdtest

import (
	"fmt"

	"github.com/syncd-dev/syncd/syncproto"
)

// LoadPush is push p of a load generator's device: n puts of small notes
// (model "notes") under keys of its own (clientID-p-i, so no two pushes of
// a run share a key), as an encoded frame with id "p<p>". The load
// benchmarks and tests of the server and of the syncd binary build their
// pushes here, so their figures are of the same writes.
func LoadPush(clock *syncproto.Clock, clientID string, p, n int) (id string, frame []byte, err error) {
	muts := make([]syncproto.Mutation, n)
	for i := range muts {
		op, err := syncproto.NewOpID()
		if err != nil {
			return "", nil, err
		}
		muts[i] = syncproto.Mutation{OpID: op, Model: "notes", Key: fmt.Sprintf("%s-%d-%d", clientID, p, i), Op: syncproto.OpPut, Value: []byte(`{"n":1}`), HLC: clock.Now()}
	}
	id = fmt.Sprintf("p%d", p)
	frame, err = syncproto.Encode(&syncproto.Push{ID: id, Mutations: muts})
	return id, frame, err
}

// LoadPushApplied returns nil when answer is the push_result of the push
// id with n results, every one applied, and otherwise an error that
// quotes the answer: what a closed-loop load generator checks before it
// counts a push as served.
func LoadPushApplied(answer []byte, id string, n int) error {
	msg, err := syncproto.Decode(answer)
	if err != nil {
		return fmt.Errorf("answer to %s: %w", id, err)
	}
	pr, ok := msg.(*syncproto.PushResult)
	if !ok || pr.ID != id || len(pr.Results) != n {
		return fmt.Errorf("want the push_result of %s with %d results, got %s", id, n, answer)
	}
	for _, r := range pr.Results {
		if r.Status != syncproto.StatusApplied {
			return fmt.Errorf("a write of %s was %s", id, r.Status)
		}
	}
	return nil
}
