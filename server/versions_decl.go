package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ValueVersionDecls builds Config.ValueVersions from declarations a
// binary reads (syncd's --model-version and --upcast flags): a model's
// current version, and for each older version the steps, in order, that
// turn its value (a JSON object) into the next version's:
//
//	rename:FROM:TO     move member FROM to TO (nothing when FROM is absent)
//	default:NAME:JSON  set member NAME to the JSON value when it is absent
//	drop:NAME          remove member NAME
//
// A value that is not a JSON object fails the step (upcast_failed).
type ValueVersionDecls map[string]ModelVersions

// SetCurrent reads "MODEL=VERSION", the version writes of MODEL are
// applied in.
func (d *ValueVersionDecls) SetCurrent(spec string) error {
	model, v, ok := strings.Cut(spec, "=")
	n, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil {
		return fmt.Errorf("model version %q: want MODEL=VERSION", spec)
	}
	d.init()
	mv := (*d)[model]
	mv.Current = n
	(*d)[model] = mv
	return mv.validate(model)
}

// SetUpcast reads "MODEL@VERSION=STEP": one step of the upcaster from
// VERSION to VERSION+1, after the steps declared before it.
func (d *ValueVersionDecls) SetUpcast(spec string) error {
	target, step, ok := strings.Cut(spec, "=")
	model, v, ok2 := strings.Cut(target, "@")
	from, err := strconv.ParseUint(v, 10, 64)
	if !ok || !ok2 || err != nil || from < 1 {
		return fmt.Errorf("upcast %q: want MODEL@VERSION=STEP", spec)
	}
	f, err := parseFieldStep(step)
	if err != nil {
		return fmt.Errorf("upcast %q: %w", spec, err)
	}
	d.init()
	mv := (*d)[model]
	if mv.Upcasters == nil {
		mv.Upcasters = map[uint64]Upcaster{}
	}
	mv.Upcasters[from] = chain(mv.Upcasters[from], f)
	(*d)[model] = mv
	return nil
}

func (d *ValueVersionDecls) init() {
	if *d == nil {
		*d = ValueVersionDecls{}
	}
}

// fieldStep changes one member of a JSON object.
type fieldStep func(obj map[string]json.RawMessage)

func parseFieldStep(step string) (fieldStep, error) {
	kind, rest, _ := strings.Cut(step, ":")
	switch kind {
	case "rename":
		from, to, ok := strings.Cut(rest, ":")
		if !ok || from == "" || to == "" {
			return nil, errors.New("want rename:FROM:TO")
		}
		return func(o map[string]json.RawMessage) {
			if v, ok := o[from]; ok {
				delete(o, from)
				o[to] = v
			}
		}, nil
	case "default":
		name, value, ok := strings.Cut(rest, ":")
		if !ok || name == "" || !json.Valid([]byte(value)) {
			return nil, errors.New("want default:NAME:JSON with a JSON value")
		}
		return func(o map[string]json.RawMessage) {
			if _, ok := o[name]; !ok {
				o[name] = json.RawMessage(value)
			}
		}, nil
	case "drop":
		if rest == "" {
			return nil, errors.New("want drop:NAME")
		}
		return func(o map[string]json.RawMessage) { delete(o, rest) }, nil
	}
	return nil, fmt.Errorf("step %q is not rename, default or drop", kind)
}

// chain returns an upcaster running up (nil: none yet) and then step.
func chain(up Upcaster, step fieldStep) Upcaster {
	return func(v json.RawMessage) (json.RawMessage, error) {
		if up != nil {
			var err error
			if v, err = up(v); err != nil {
				return nil, err
			}
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
			return nil, errors.New("the value is not a JSON object")
		}
		step(obj)
		return json.Marshal(obj)
	}
}
