package syncproto

import (
	"encoding/json"
	"errors"
)

// A message whose members do not all fit their fields (a member of the
// wrong JSON type, an unparsable hlc) is decoded member by member, so that
// its validation can report the first wrong member in the documented
// member order (PROTOCOL.md 5.1 and 5.3) whatever the order of the members
// in the frame. encoding/json alone cannot: it stops at an Unmarshaler's
// error and keeps only the first type error in frame order.

// field is one member decoded on its own: its JSON text as sent (nil when
// absent), where it goes, and the code for a member that does not fit.
type field struct {
	name string
	raw  json.RawMessage
	into any
	code Code
}

// memberErrors holds, by member name, why a member did not decode.
type memberErrors map[string]*Error

// decodeFields decodes each present field into its place and returns why
// the ones that did not fit failed (nil when all did).
func decodeFields(fields []field) memberErrors {
	var errs memberErrors
	for _, f := range fields {
		if f.raw == nil {
			continue
		}
		err := json.Unmarshal(f.raw, f.into)
		if err == nil {
			continue
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			te.Field = f.name // the message names the member
			errs = errs.with(f.name, Errorf(f.code, "%s", describeJSONError(err)))
			continue
		}
		errs = errs.with(f.name, Errorf(f.code, "%s: %s", f.name, describeJSONError(err)))
	}
	return errs
}

// with returns e holding err for member, allocating e when nil.
func (e memberErrors) with(member string, err *Error) memberErrors {
	if e == nil {
		e = memberErrors{}
	}
	e[member] = err
	return e
}

// err returns why member did not decode, or nil.
func (e memberErrors) err(member string) error {
	if pe := e[member]; pe != nil {
		return pe
	}
	return nil
}

// check is one member's validation in a message's documented order.
type check struct {
	member string
	valid  func() error
}

// firstWrong runs checks in order and returns the first refusal: the
// member's decoding failure, else its rule's.
func (e memberErrors) firstWrong(checks []check) error {
	for _, c := range checks {
		if err := e.err(c.member); err != nil {
			return err
		}
		if err := c.valid(); err != nil {
			return err
		}
	}
	return nil
}
