package client

import (
	"sync"

	"github.com/syncd-dev/syncd/syncproto"
)

// maxEchoes bounds the applied writes echoes remembers: past it, it forgets
// them all (their echoes, if they come, are looked up in the records). It
// is reached only when many echoes never come (a model the token may write
// but not read) or the feed is far behind.
const maxEchoes = 4096

// echoes remembers, by op id, the version at which this client's applied
// writes were folded into the records when their push was settled, so the
// change feed's echo of such a write (most of what a busy device receives)
// is known to be applied without a read. A remembered version is a floor
// of the record's: a record's version only rises, but by a snapshot reset,
// which forgets everything (reset), and a note that a reset may have
// overtaken is dropped (the generation changed). Safe for concurrent use.
type echoes struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]uint64
}

// generation is taken before a commit whose versions are then noted.
func (e *echoes) generation() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen
}

// note records that the commit begun at generation gen folded the applied
// outcomes of ds into the records.
func (e *echoes) note(gen uint64, ds []decision) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if gen != e.gen {
		return
	}
	for _, d := range ds {
		if d.outcome.Status != StatusApplied || d.upcast || d.unkept {
			// An upcast write's echo carries the value as applied; an
			// unkept write's is the first the records see of it.
			continue
		}
		if len(e.m) >= maxEchoes {
			clear(e.m)
		}
		if e.m == nil {
			e.m = map[string]uint64{}
		}
		e.m[d.outcome.OpID] = d.outcome.Version
	}
}

// reset forgets every note: call it before and after replacing the records.
func (e *echoes) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gen++
	clear(e.m)
}

// drop returns the entries not known to be applied, in order, and forgets
// the notes of those that are (an echo comes once; one sent again after a
// reconnect is looked up).
func (e *echoes) drop(entries []syncproto.Change) []syncproto.Change {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m) == 0 {
		return entries
	}
	var rest []syncproto.Change
	for i, c := range entries {
		v, ok := e.m[c.OpID]
		if ok && v >= c.Version {
			delete(e.m, c.OpID)
			if rest == nil {
				rest = append(make([]syncproto.Change, 0, len(entries)), entries[:i]...)
			}
			continue
		}
		if rest != nil {
			rest = append(rest, c)
		}
	}
	if rest == nil {
		return entries
	}
	return rest
}
