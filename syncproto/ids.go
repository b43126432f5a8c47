package syncproto

import (
	"fmt"
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

// isID reports whether s matches IDPattern. It and isLowerName are byte
// loops rather than regexps: they run for every mutation, result and
// timestamp a frame carries, where a regexp match cost a microsecond.
func isID(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// isLowerName reports whether s matches ^[a-z][a-z0-9_]{0,maxTail}$: the
// shape of model names (ModelPattern), codes and statuses.
func isLowerName(s string, maxTail int) bool {
	if len(s) < 1 || len(s) > 1+maxTail || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_':
		default:
			return false
		}
	}
	return true
}

// ValidateID reports whether id is a valid client id, node id or timestamp
// origin. The error is an *Error with CodeInvalidClientID.
func ValidateID(id string) error {
	if !isID(id) {
		return Errorf(CodeInvalidClientID, "id %q must match %s", truncate(id), IDPattern)
	}
	return nil
}

// ValidateModel reports whether name is a valid model name. The error is an
// *Error with CodeInvalidModel.
func ValidateModel(name string) error {
	if !isLowerName(name, 63) {
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
