package syncproto

import "slices"

// Value versions (PROTOCOL.md 5.3): a model's value shape is numbered from
// 1; a mutation says which shape its value has, and a server says which
// shapes it accepts.
const (
	// MaxValueVersion bounds a mutation's value_version and every version
	// a server announces.
	MaxValueVersion = 1 << 20
	// MaxAcceptedVersions bounds how many value versions a server announces
	// for one model (welcome, needs_upgrade).
	MaxAcceptedVersions = 64
)

// EffectiveValueVersion returns the value version m was made in: its
// ValueVersion, or 1 when it carries none.
func (m *Mutation) EffectiveValueVersion() uint64 {
	if m.ValueVersion == 0 {
		return 1
	}
	return m.ValueVersion
}

// validateValueVersion checks a mutation's value_version: absent (0) or
// 1..MaxValueVersion.
func validateValueVersion(v uint64) error {
	if v > MaxValueVersion {
		return Errorf(CodeBadRequest, "value_version = %d is more than %d", v, MaxValueVersion)
	}
	return nil
}

// validateAccepted checks a list of accepted value versions: at most
// MaxAcceptedVersions, each 1..MaxValueVersion, strictly ascending.
func validateAccepted(name string, vs []uint64) error {
	if len(vs) > MaxAcceptedVersions {
		return Errorf(CodeBadRequest, "%s lists %d versions, more than %d", name, len(vs), MaxAcceptedVersions)
	}
	for i, v := range vs {
		if v < 1 || v > MaxValueVersion {
			return Errorf(CodeBadRequest, "%s holds %d, not 1..%d", name, v, MaxValueVersion)
		}
		if i > 0 && v <= vs[i-1] {
			return Errorf(CodeBadRequest, "%s is not strictly ascending", name)
		}
	}
	return nil
}

// Accepts reports whether a server announcing versions for a model
// accepts version v. nil (it announced none for the model) accepts every
// version: the server does not check that model's shapes.
func Accepts(versions []uint64, v uint64) bool {
	if versions == nil {
		return true
	}
	_, ok := slices.BinarySearch(versions, v)
	return ok
}

// ValidateValue checks a put's value as Mutation.Validate does: present,
// at most MaxPayloadBytes, JSON, nesting at most MaxValueDepth. The error
// is an *Error.
func ValidateValue(v []byte) error {
	if len(v) == 0 {
		return Errorf(CodeInvalidOp, "put requires a value")
	}
	m := Mutation{Op: OpPut, Value: v}
	return m.validateValue()
}
