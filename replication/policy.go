package replication

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/syncd-dev/syncd/syncproto"
)

// A model's conflict policy is a syncproto.Policy (the wire names it in
// welcome's model access): each model declares exactly one, in server
// configuration. How replication decides under each:
//   - syncproto.PolicyLWW: the write with the higher HLC wins (ties break on
//     the timestamp's origin); the loser is written to the conflict log.
//   - syncproto.PolicyOptimistic: a write names the version it was based on
//     and is applied only if that is still the current version; otherwise
//     it is refused with the current (winning) version and value.
//   - syncproto.PolicyHook: an embedder's Hook decides, bounded by a
//     deadline, with syncproto.PolicyLWW as the fallback when it cannot.
//   - syncproto.PolicyNone is only a default (Config's AnyModel entry): a
//     write to a model the configuration does not declare is refused
//     invalid_model.

// DefaultPolicy applies to every model the configuration does not name.
const DefaultPolicy = syncproto.PolicyLWW

// AnyModel is the Config key of the policy for models the configuration
// does not declare; without it they get DefaultPolicy. It is no model
// name ("*" breaks the model name rule).
const AnyModel = "*"

// ErrUnknownPolicy is wrapped by ParsePolicy and Config.Set when a policy
// name is not one of lww, optimistic, hook. It is a configuration error:
// fix the flag or file and restart.
var ErrUnknownPolicy = errors.New("unknown conflict policy")

// ParsePolicy returns the Policy named s (exactly "lww", "optimistic" or
// "hook"). Any other text, including "", wraps ErrUnknownPolicy.
func ParsePolicy(s string) (syncproto.Policy, error) {
	switch p := syncproto.Policy(s); p {
	case syncproto.PolicyLWW, syncproto.PolicyOptimistic, syncproto.PolicyHook:
		return p, nil
	}
	return "", fmt.Errorf("parse policy %q: %w (want lww, optimistic or hook)", s, ErrUnknownPolicy)
}

// Config maps model names to their policy. The zero value (nil) is valid and
// gives every model DefaultPolicy.
//
// *Config implements flag.Value, so a repeated "--model NAME=POLICY" flag
// fills it: each Set adds one declaration, and declaring a model twice is an
// error, because a model's policy is declared once.
type Config map[string]syncproto.Policy

// For returns the policy declared for model, or Default.
func (c Config) For(model string) syncproto.Policy {
	if p, ok := c[model]; ok {
		return p
	}
	return c.Default()
}

// Default returns the policy of undeclared models: the AnyModel entry, or
// DefaultPolicy.
func (c Config) Default() syncproto.Policy {
	if p, ok := c[AnyModel]; ok {
		return p
	}
	return DefaultPolicy
}

// Declared reports whether model has a declaration of its own.
func (c Config) Declared(model string) bool {
	_, ok := c[model]
	return ok && model != AnyModel
}

// Uses reports whether any model is declared with policy p.
func (c Config) Uses(p syncproto.Policy) bool {
	for _, q := range c {
		if q == p {
			return true
		}
	}
	return false
}

// Set parses one "NAME=POLICY" declaration and adds it. NAME must be a valid
// model name (syncproto.ValidateModel) and POLICY as in ParsePolicy, or
// NAME is AnyModel and POLICY may also be "none" (undeclared models are
// refused).
func (c *Config) Set(decl string) error {
	name, policy, ok := strings.Cut(decl, "=")
	if !ok {
		return fmt.Errorf("parse model policy %q: want NAME=POLICY", decl)
	}
	var p syncproto.Policy
	var err error
	if name == AnyModel && syncproto.Policy(policy) == syncproto.PolicyNone {
		p = syncproto.PolicyNone
	} else if name != AnyModel {
		err = syncproto.ValidateModel(name)
	}
	if err == nil && p == "" {
		p, err = ParsePolicy(policy)
	}
	if err != nil {
		return fmt.Errorf("parse model policy %q: %w", decl, err)
	}
	if _, dup := (*c)[name]; dup {
		return fmt.Errorf("parse model policy %q: model %s declared twice", decl, name)
	}
	if *c == nil {
		*c = make(Config)
	}
	(*c)[name] = p
	return nil
}

// String returns the declarations as "a=lww,b=optimistic", sorted by model.
func (c *Config) String() string {
	if c == nil {
		return ""
	}
	decls := make([]string, 0, len(*c))
	for _, name := range slices.Sorted(maps.Keys(*c)) {
		decls = append(decls, name+"="+string((*c)[name]))
	}
	return strings.Join(decls, ",")
}
