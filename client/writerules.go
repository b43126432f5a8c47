package client

import (
	"errors"
	"fmt"

	"github.com/syncd-dev/syncd/syncproto"
)

var (
	// ErrForbiddenModel says the session's token may not write the model.
	ErrForbiddenModel = errors.New("client: model not writable with this token")
	// ErrUndeclaredModel says the server declares no such model and
	// refuses writes to undeclared ones.
	ErrUndeclaredModel = errors.New("client: model not declared on the server")
	// ErrVersionRequired says the model uses optimistic concurrency: write
	// it with PutIfVersion or DeleteIfVersion.
	ErrVersionRequired = errors.New("client: model requires a base version")
)

// WriteRefusedError says a Put or Delete was refused at the call, before
// it was queued, because the server's last welcome said the write can
// never be accepted. errors.Is matches it against ErrForbiddenModel,
// ErrUndeclaredModel or ErrVersionRequired; Code is the refusal code the
// server would answer.
type WriteRefusedError struct {
	Code  syncproto.Code
	Model string
}

func (e *WriteRefusedError) Error() string {
	return fmt.Sprintf("client: write to model %s refused: %s", e.Model, e.Code)
}

// Is matches the sentinel of e's code.
func (e *WriteRefusedError) Is(target error) bool {
	switch target {
	case ErrForbiddenModel:
		return e.Code == syncproto.CodeForbiddenModel
	case ErrUndeclaredModel:
		return e.Code == syncproto.CodeInvalidModel
	case ErrVersionRequired:
		return e.Code == syncproto.CodeMissingBaseVersion
	}
	return false
}

// modelRules is what the last welcome said about the models: the declared
// ones the token may use, and the policy of the others.
type modelRules struct {
	models        map[string]syncproto.ModelAccess
	defaultPolicy syncproto.Policy
}

// welcomed records what w says about the models, so later writes the
// server would refuse for good fail at the call.
func (c *Client) welcomed(w *syncproto.Welcome) {
	c.models.Store(&modelRules{models: w.Models, defaultPolicy: w.DefaultPolicy})
}

// check returns the refusal the server would answer m with for good, as
// far as the welcome tells (nil rules: no welcome yet, nothing known). A
// model the welcome does not list may still be forbidden by the token's
// scopes: the server refuses it, and the write is dead-lettered at once.
func (r *modelRules) check(m *syncproto.Mutation) error {
	if r == nil {
		return nil
	}
	policy := r.defaultPolicy
	access, declared := r.models[m.Model]
	switch {
	case declared && !access.Write:
		return &WriteRefusedError{Code: syncproto.CodeForbiddenModel, Model: m.Model}
	case declared:
		policy = access.Policy
	case policy == syncproto.PolicyNone:
		return &WriteRefusedError{Code: syncproto.CodeInvalidModel, Model: m.Model}
	}
	if policy == syncproto.PolicyOptimistic && m.BaseVersion == nil {
		return &WriteRefusedError{Code: syncproto.CodeMissingBaseVersion, Model: m.Model}
	}
	return nil
}
