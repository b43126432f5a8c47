package syncproto

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// scanSeeds are mutations in and just outside the plain form scanMutation
// reads: every member, nulls, whitespace, duplicates, escapes, unicode,
// numbers at uint64's edge, values of every JSON type and broken ones.
var scanSeeds = []string{
	`{"op_id":"0190a6f2-6b1d-7c3e-9f00-000000000001","model":"notes","key":"n-1","op":"put","value":{"title":"a","tags":["x",{"y":null}],"n":-1.5e3},"hlc":"1796374172991.0.dev","base_version":3,"seen_version":0}`,
	`{"op_id":"0190a6f2-6b1d-7c3e-9f00-000000000001","model":"notes","key":"n-1","op":"delete","hlc":"1796374172991.0.dev"}`,
	` { "op_id" : "x" , "value" : [ 1 , "a \" ] } , \\" , { } ] , "op" : "put" } `,
	`{"value":null,"base_version":null,"seen_version":null}`,
	`{"value":"s","value":{"b":2},"key":"a","key":"b","base_version":1,"base_version":null}`,
	`{"base_version":18446744073709551615}`,
	`{"base_version":18446744073709551616}`,
	`{"base_version":-1}`, `{"base_version":01}`, `{"base_version":1.0}`, `{"base_version":1e2}`, `{"base_version":"1"}`,
	`{"key":"caf\u00e9"}`, `{"key":"café"}`, `{"key":"a\nb"}`, `{"key":"\ud800"}`, "{\"key\":\"\xff\"}",
	`{"Op_ID":"x"}`, `{"other":1}`, `{"hlc":"bad"}`, `{"hlc":null}`, `{"hlc":1}`, `{"op":1}`, `{"op":null}`,
	`{"value":tru}`, `{"value":{"a":1}`, `{"value":{"a":1}}}`, `{"value":[1,]}`, `{"value":"\x01"}`, `{"value":1 2}`,
	`{}`, ` {}`, `[]`, `null`, `"x"`, `{"key":"a",}`, `{"key" "a"}`, `{"key":"a"} x`, ``, `{`,
}

// pushSeeds are push frames around the plain form scanPush reads.
func pushSeeds() []string {
	var seeds []string // readable ones first (checkVariants favours the first five)
	for i, m := range scanSeeds {
		seeds = append(seeds, `{"type":"push","id":"p1","mutations":[`+m+`,`+scanSeeds[(i+1)%len(scanSeeds)]+`]}`)
	}
	return append(seeds,
		`{"type":"push","id":"p1","mutations":[]}`, `{"id":"p1","type":"push","mutations":[{}]}`,
		`{"type":"push","id":"p1","mutations":[{},{}],"mutations":[{"key":"a"}]}`,
		`{"type":"push","id":"p1","mutations":null}`, `{"type":"push","id":"p\u0031","mutations":[]}`,
		`{"type":"push","id":"p1","extra":1,"mutations":[]}`, `{"type":"push","id":"p1"}`, `{"type":"push","id":"p1","mutations":[]} `,
		`{"type":"push","id":"p1","mutations":[],}`, `{"type":"push","id":"p1","mutations":[{}{}]}`,
	)
}

// changesSeeds are changes frames around the plain form scanChanges reads.
func changesSeeds() []string {
	entry := `{"seq":7,"op_id":"0190a6f2-6b1d-7c3e-9f00-000000000001","model":"notes","key":"n-1","op":"put","value":{"t":"a \" ]"},"version":2,"hlc":"1796374172991.0.dev","deleted":false}`
	tomb := `{"seq":8,"op_id":"0190a6f2-6b1d-7c3e-9f00-000000000002","model":"notes","key":"n-1","op":"delete","version":3,"hlc":"1796374172991.1.dev","deleted":true}`
	return []string{
		`{"type":"changes","id":"feed","entries":[` + entry + `,` + tomb + `],"cursor":9,"head":12,"more":true}`,
		`{"type":"changes","id":"feed","entries":[],"cursor":3,"head":3,"more":false}`,
		` {"more":false,"head":3,"cursor":3,"entries":[` + tomb + `],"id":"f","type":"changes"} `,
		`{"type":"changes","id":"feed","entries":[` + entry + `],"cursor":9,"head":12,"more":true}`,
		`{"type":"changes","id":"feed","entries":[{"seq":1,"value":null,"deleted":true,"version":0}],"cursor":1,"head":1,"more":false}`,
		`{"type":"changes","id":"feed","entries":null,"cursor":1}`, `{"type":"changes","entries":[],"entries":[]}`,
		`{"type":"changes","cursor":-1}`, `{"type":"changes","cursor":1.5}`, `{"type":"changes","more":null}`, `{"type":"changes","more":"true"}`,
		`{"type":"changes","entries":[{"seq":null}]}`, `{"type":"changes","entries":[{"deleted":1}]}`, `{"type":"changes","entries":[{"Seq":1}]}`,
		`{"type":"changes","id":"feed","entries":[{"key":"caf\u00e9"}]}`, `{"type":"changes","cursor":18446744073709551616}`,
	}
}

// FuzzScanChanges holds scanChanges to encoding/json the same way.
func FuzzScanChanges(f *testing.F) {
	for _, s := range changesSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScanChangesMatchesJSON(t, b) })
}

// FuzzScanPush holds scanPush to encoding/json the same way.
func FuzzScanPush(f *testing.F) {
	for _, s := range pushSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScanPushMatchesJSON(t, b) })
}

// FuzzScanMutation holds scanMutation to encoding/json: whatever it
// accepts, encoding/json decodes without error into the same mutation.
func FuzzScanMutation(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkScanMatchesJSON(t, b) })
}

// The same check over variants of real mutations with bytes flipped,
// dropped and inserted: 20,000 of them in every test run, where the fuzz
// target runs only its seeds.
func TestScanMutationAgreesWithEncodingJSON(t *testing.T) {
	checkVariants(t, scanSeeds, checkScanMatchesJSON)
}

func TestScanChangesAgreesWithEncodingJSON(t *testing.T) {
	checkVariants(t, changesSeeds(), checkScanChangesMatchesJSON)
}

func TestScanPushAgreesWithEncodingJSON(t *testing.T) {
	checkVariants(t, pushSeeds(), checkScanPushMatchesJSON)
}

// checkVariants runs check over 20,000 variants of seeds, the first five
// half the time, and fails unless check read at least 1,000 of them.
func checkVariants(t *testing.T, seeds []string, check func(*testing.T, []byte) bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([][]byte, 0, len(seeds))
	for _, s := range seeds {
		base = append(base, []byte(s))
	}
	accepted := 0
	alphabet := []byte(`{}[]":, \0123456789-.eEnulltrfasbvopidkyhc` + "\x00\x7f\xc3\xa9")
	for range 20000 {
		seed := base[rng.IntN(len(base))]
		if rng.IntN(2) == 0 {
			seed = base[rng.IntN(5)] // the readable seeds, half the time
		}
		b := append([]byte(nil), seed...)
		for range 1 + rng.IntN(2) {
			if len(b) == 0 {
				break
			}
			at := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b[at] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				b = append(b[:at], b[at+1:]...)
			default:
				b = append(b[:at], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[at:]...)...)
			}
		}
		if check(t, b) {
			accepted++
		}
	}
	t.Logf("%d of 20,000 variants read by the scan, each as encoding/json reads it", accepted)
	if accepted < 1000 {
		t.Fatalf("only %d of 20,000 variants were read by the scan: the check proves little", accepted)
	}
}

func checkScanChangesMatchesJSON(t *testing.T, b []byte) bool {
	t.Helper()
	var fast, slow Changes
	if !scanChanges(b, &fast) {
		return false
	}
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("scanChanges read %q, which encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("scanChanges read %q as %#v; encoding/json as %#v", b, fast, slow)
	}
	return true
}

func checkScanPushMatchesJSON(t *testing.T, b []byte) bool {
	t.Helper()
	var fast, slow Push
	if !scanPush(b, &fast) {
		return false
	}
	if !unmarshalPlainPush(b, &slow) {
		t.Fatalf("scanPush read %q, which encoding/json refuses", b)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("scanPush read %q as %#v; encoding/json as %#v", b, fast, slow)
	}
	return true
}

func checkScanMatchesJSON(t *testing.T, b []byte) bool {
	t.Helper()
	var fast Mutation
	if !scanMutation(b, 1, &fast) {
		return false
	}
	type plain Mutation
	var slow plain
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("scanMutation read %q, which encoding/json refuses: %v", b, err)
	}
	if !reflect.DeepEqual(fast, Mutation(slow)) {
		t.Fatalf("scanMutation read %q as %#v; encoding/json as %#v", b, fast, Mutation(slow))
	}
	return true
}

// A value nesting to MaxFrameDepth with its mutation is read; one level
// more is left to encoding/json, which refuses it, as it refuses the frame.
func TestScanMutationLeavesTooDeepValuesToEncodingJSON(t *testing.T) {
	nested := func(n int) []byte {
		return []byte(`{"value":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	var m Mutation
	if !checkScanMatchesJSON(t, nested(MaxFrameDepth-1)) {
		t.Fatal("a value nesting to MaxFrameDepth with its mutation was not read")
	}
	if scanMutation(nested(MaxFrameDepth), 1, &m) {
		t.Fatal("a value nesting beyond MaxFrameDepth was read")
	}
}
