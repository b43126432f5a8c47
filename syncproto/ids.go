package syncproto

import (
	"fmt"
	"regexp"
)

// The identifier rules, as stated in PROTOCOL.md. A client id (and a server
// node id, which shares the rule because both appear as the origin of an HLC
// timestamp) is 1 to MaxIDBytes bytes of ASCII letters, digits, '.', '_', ':'
// and '-'. A model name is a lowercase letter followed by up to 63 lowercase
// letters, digits or underscores.
const (
	// IDPattern is the rule for client ids, node ids and timestamp origins.
	IDPattern = `^[A-Za-z0-9._:-]{1,64}$`
	// ModelPattern is the rule for model names.
	ModelPattern = `^[a-z][a-z0-9_]{0,63}$`
)

var (
	idPattern    = regexp.MustCompile(IDPattern)
	modelPattern = regexp.MustCompile(ModelPattern)
)

// ValidateID reports whether id is a valid client id, node id or timestamp
// origin. The error is an *Error with CodeInvalidClientID.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return Errorf(CodeInvalidClientID, "id %q must match %s", truncate(id), IDPattern)
	}
	return nil
}

// ValidateModel reports whether name is a valid model name. The error is an
// *Error with CodeInvalidModel.
func ValidateModel(name string) error {
	if !modelPattern.MatchString(name) {
		return Errorf(CodeInvalidModel, "model %q must match %s", truncate(name), ModelPattern)
	}
	return nil
}

// truncate shortens untrusted text quoted in an error message so that an
// oversize field cannot make the error frame oversize too.
func truncate(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s...(%d bytes)", s[:max], len(s))
}
