package syncproto

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// TestNameMatchersAgreeWithPatterns: the byte loops that replaced the
// regexps accept exactly what the documented patterns accept.
func TestNameMatchersAgreeWithPatterns(t *testing.T) {
	id := regexp.MustCompile(IDPattern)
	model := regexp.MustCompile(ModelPattern)
	status := regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	var cases []string
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{byte(c)}), "a"+string([]byte{byte(c)}), string([]byte{byte(c)})+"a")
	}
	for _, n := range []int{0, 1, 31, 32, 33, 63, 64, 65, 66} {
		cases = append(cases, strings.Repeat("a", n), strings.Repeat("Z", n), strings.Repeat("_", n), "a"+strings.Repeat("9", n))
	}
	cases = append(cases, "é", "aé", "a\n", "\na", "a\x00", "client-1", "node:2.a_b", "notes", "bad-model")
	alphabet := []byte("azAZ09._:-é\n \x00\xff")
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(70))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := isID(s), id.MatchString(s); got != want {
			t.Fatalf("isID(%q) = %v, IDPattern says %v", s, got, want)
		}
		if got, want := isLowerName(s, 63), model.MatchString(s); got != want {
			t.Fatalf("isLowerName(%q, 63) = %v, ModelPattern says %v", s, got, want)
		}
		if got, want := isStatus(Status(s)), status.MatchString(s); got != want {
			t.Fatalf("isStatus(%q) = %v, the status pattern says %v", s, got, want)
		}
	}
}

// TestIsCanonicalUUIDAgreesWithUUIDString: an op id is canonical exactly
// when parsing it and formatting it back gives it unchanged.
func TestIsCanonicalUUIDAgreesWithUUIDString(t *testing.T) {
	canonical := func(id string) bool {
		u, err := uuid.Parse(id)
		return err == nil && u.String() == id
	}
	good := uuid.Must(uuid.NewV7()).String()
	cases := []string{good, strings.ToUpper(good), "{" + good + "}", "urn:uuid:" + good, strings.ReplaceAll(good, "-", ""), "", good[:35], good + "0"}
	alphabet := []byte("0af9AFg-{}:\xff")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := []byte(good)
		for range 1 + rng.IntN(2) {
			b[rng.IntN(len(b))] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, id := range cases {
		if got, want := isCanonicalUUID(id), canonical(id); got != want {
			t.Fatalf("isCanonicalUUID(%q) = %v, uuid says %v", id, got, want)
		}
	}
}
