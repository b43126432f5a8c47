package syncproto_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/syncproto"
)

func ExampleDecode() {
	frame := []byte(`{"type":"push","id":"p1","mutations":[
		{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abcd","model":"todos","key":"t/1","op":"put","value":{"title":"milk"},"hlc":"1733140000000.0.client-a"},
		{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abce","model":"todos","key":"","op":"put","value":1,"hlc":"1733140000000.1.client-a"}]}`)
	msg, err := syncproto.DecodeRequest(frame)
	if err != nil {
		fmt.Println("refuse the frame:", err)
		return
	}
	push := msg.(*syncproto.Push)
	for _, m := range push.Mutations {
		if err := m.Validate(); err != nil {
			fmt.Println(m.OpID, "rejected:", err.(*syncproto.Error).Code)
			continue
		}
		fmt.Println(m.OpID, "valid")
	}
	// Output:
	// 01938a5e-7b2c-7cde-8f01-23456789abcd valid
	// 01938a5e-7b2c-7cde-8f01-23456789abce rejected: invalid_key
}

func ExampleEncode() {
	frame, err := syncproto.Encode(&syncproto.Error{ID: "p7", Code: syncproto.CodeRateLimited, Message: "slow down", Retryable: true, RetryAfterMS: 200})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(frame))
	// Output:
	// {"type":"error","id":"p7","code":"rate_limited","message":"slow down","retryable":true,"retry_after_ms":200}
}

func ExampleDecode_refusal() {
	_, err := syncproto.DecodeRequest([]byte(`{"type":"pull","id":"q1","cursor":0,"limit":5000}`))
	refusal := err.(*syncproto.Error)
	frame, _ := syncproto.Encode(refusal) // send it back as is
	fmt.Println(string(frame))
	// Output:
	// {"type":"error","id":"q1","code":"bad_request","message":"limit 5000 outside 0..1000","retryable":false}
}

func ExampleResult_Action() {
	answer := []byte(`{"type":"push_result","id":"p1","results":[
		{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abcd","status":"applied","version":1,"seq":58,"hlc":"1733140000000.0.client-a"},
		{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abce","status":"rejected","code":"forbidden_model"},
		{"op_id":"01938a5e-7b2c-7cde-8f01-23456789abcf","status":"expired"}]}`)
	msg, err := syncproto.Decode(answer)
	if err != nil {
		panic(err)
	}
	for _, r := range msg.(*syncproto.PushResult).Results {
		fmt.Println(r.Status, "->", r.Action())
	}
	// Output:
	// applied -> done
	// rejected -> charge
	// expired -> dead_letter
}

func ExampleClock() {
	physical := time.UnixMilli(1733140000000)
	clock := syncproto.NewClock("client-a", func() time.Time { return physical })

	fmt.Println(clock.Now())
	fmt.Println(clock.Now()) // same millisecond: the logical counter moves

	// A reading from a peer whose clock runs ahead pulls this clock forward.
	fmt.Println(clock.Observe(syncproto.Timestamp{Wall: 1733140000500, Logical: 4, Origin: "node-1"}))

	b, _ := json.Marshal(clock.Peek())
	fmt.Println(string(b))
	// Output:
	// 1733140000000.0.client-a
	// 1733140000000.1.client-a
	// 1733140000500.5.client-a
	// "1733140000500.5.client-a"
}
