package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

// Upcaster turns a value of one version of a model's shape into the next
// version's shape. It must be a pure function of its input: it runs at the
// edge, before the write is committed or replicated, and its answer is
// carried in the write (replication.Write.Upcast). An error, a panic, or an
// answer that is not a JSON value within the protocol's limits refuses the
// write with upcast_failed, alone.
type Upcaster func(value json.RawMessage) (json.RawMessage, error)

// ModelVersions declares the value versions a server accepts for one
// model (Config.ValueVersions).
type ModelVersions struct {
	// Current is the version writes are applied in, 1..MaxValueVersion.
	Current uint64
	// Upcasters, by the version they read, each turn a value of version v
	// into version v+1. A version below Current is accepted when every
	// step from it to Current has an upcaster; a write of it is applied
	// in the Current shape. Keys must be below Current.
	Upcasters map[uint64]Upcaster
}

// Accepted returns the versions mv accepts, ascending: Current and each
// version below it from which an unbroken chain of upcasters leads to it.
// At most syncproto.MaxAcceptedVersions, the newest kept.
func (mv ModelVersions) Accepted() []uint64 {
	out := []uint64{mv.Current}
	for v := mv.Current - 1; v >= 1 && len(out) < syncproto.MaxAcceptedVersions; v-- {
		if mv.Upcasters[v] == nil {
			break
		}
		out = append(out, v)
	}
	slices.Reverse(out)
	return out
}

// validate checks a declaration as New does.
func (mv ModelVersions) validate(model string) error {
	if err := syncproto.ValidateModel(model); err != nil {
		return fmt.Errorf("ValueVersions: %w", err)
	}
	if mv.Current < 1 || mv.Current > syncproto.MaxValueVersion {
		return fmt.Errorf("ValueVersions[%s]: Current = %d, want 1..%d", model, mv.Current, syncproto.MaxValueVersion)
	}
	for v, up := range mv.Upcasters {
		if v < 1 || v >= mv.Current {
			return fmt.Errorf("ValueVersions[%s]: an upcaster from version %d, want 1..%d (below Current)", model, v, mv.Current-1)
		}
		if up == nil {
			return fmt.Errorf("ValueVersions[%s]: the upcaster from version %d is nil", model, v)
		}
	}
	return nil
}

// valueVersions is the server's per-model version window (Config.ValueVersions):
// it announces the versions in welcome and checks and upcasts each pushed
// write at the edge. Read-only after New.
type valueVersions struct {
	models   map[string]ModelVersions
	accepted map[string][]uint64
	log      *slog.Logger
	// refusals counts writes refused for their value version, by code;
	// upcasts counts writes applied after an upcast.
	refusals *prometheus.CounterVec
	upcasts  prometheus.Counter
}

func newValueVersions(models map[string]ModelVersions, log *slog.Logger, reg prometheus.Registerer) (*valueVersions, error) {
	vv := &valueVersions{models: maps.Clone(models), accepted: map[string][]uint64{}, log: log,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_value_version_refusals_total", Help: "Writes refused for their value version, by code (needs_upgrade: the version is not accepted; upcast_failed: an upcaster failed or returned an invalid value).",
		}, []string{"code"}),
		upcasts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_upcasts_total", Help: "Writes of an older value version upcast to their model's current version at the edge.",
		}),
	}
	for model, mv := range models {
		if err := mv.validate(model); err != nil {
			return nil, err
		}
		vv.accepted[model] = mv.Accepted()
	}
	for _, code := range []syncproto.Code{syncproto.CodeNeedsUpgrade, syncproto.CodeUpcastFailed} {
		vv.refusals.WithLabelValues(string(code))
	}
	if err := reg.Register(vv.refusals); err != nil {
		return nil, err
	}
	if err := reg.Register(vv.upcasts); err != nil {
		return nil, err
	}
	return vv, nil
}

// announced is welcome's value_versions: nil when no model declares
// versions, so an older server's welcome and this one's read alike.
func (vv *valueVersions) announced() map[string][]uint64 {
	if len(vv.accepted) == 0 {
		return nil
	}
	return vv.accepted
}

// check refuses or upcasts each admitted write of b by its value version,
// in order. paused is the session's set of models it answered
// needs_upgrade or upcast_failed: every later write of such a model on the
// session is answered needs_upgrade too, so a device never sees a later
// write of a paused model applied before an earlier one (PROTOCOL.md
// 5.4). Writes of models that declare no versions pass as sent.
func (vv *valueVersions) check(b *replication.Batch, paused map[string]bool) {
	for i := range b.Writes {
		w := &b.Writes[i]
		if w.Refusal != nil {
			continue
		}
		m := &w.Mutation
		mv, declared := vv.models[m.Model]
		if !declared && !paused[m.Model] {
			continue
		}
		v := m.EffectiveValueVersion()
		accepted := vv.accepted[m.Model]
		switch {
		case paused[m.Model]:
			w.Refusal = vv.refuse(syncproto.CodeNeedsUpgrade, "model %s is paused on this connection after an earlier write of it was refused; reconnect to resend in order", m.Model)
		case !syncproto.Accepts(accepted, v):
			w.Refusal = vv.refuse(syncproto.CodeNeedsUpgrade, "model %s: value_version %d is not accepted (accepted: %s)", m.Model, v, versionList(accepted))
		case v < mv.Current && m.Op == syncproto.OpPut:
			up, err := mv.upcast(m.Value, v)
			if err != nil {
				vv.log.Warn("upcast failed; write refused", "op_id", m.OpID, "model", m.Model, "value_version", v, "err", err)
				w.Refusal = vv.refuse(syncproto.CodeUpcastFailed, "model %s: upcasting value_version %d to %d failed: %v", m.Model, v, mv.Current, err)
				break
			}
			w.Upcast = up
			vv.upcasts.Inc()
		}
		if w.Refusal != nil {
			paused[m.Model] = true
			w.Accepted = accepted
		}
	}
}

func (vv *valueVersions) refuse(code syncproto.Code, format string, args ...any) *syncproto.Error {
	vv.refusals.WithLabelValues(string(code)).Inc()
	return syncproto.Errorf(code, format, args...)
}

// errUpcastPanicked wraps the value an upcaster panicked with.
var errUpcastPanicked = errors.New("upcaster panicked")

// upcast runs the steps from version v to Current and checks the answer
// is a value a client could have sent.
func (mv ModelVersions) upcast(value json.RawMessage, v uint64) (out json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: %v", errUpcastPanicked, r)
		}
	}()
	out = value
	for ; v < mv.Current; v++ {
		if out, err = mv.Upcasters[v](bytes.Clone(out)); err != nil {
			return nil, fmt.Errorf("step %d to %d: %w", v, v+1, err)
		}
	}
	if err := syncproto.ValidateValue(out); err != nil {
		return nil, fmt.Errorf("the upcast value: %w", err)
	}
	return out, nil
}

func versionList(vs []uint64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ", ")
}
