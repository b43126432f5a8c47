package server

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultEventLogInterval is Config.EventLogInterval's default.
const DefaultEventLogInterval = 10 * time.Second

// eventLog aggregates events that a peer can cause at will (refusals,
// authentication failures): instead of one line per event it writes, once
// per interval in which any happened, one line per kind of event with its
// count. The kinds are fixed strings and error codes, so the lines per
// interval are bounded whatever a peer sends.
type eventLog struct {
	log      *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	counts map[eventKind]*eventCount
	timer  *time.Timer // pending flush; nil when nothing is counted
	closed bool
}

type eventKind struct{ msg, code string }

type eventCount struct {
	n          int
	lastRemote string
}

func newEventLog(log *slog.Logger, interval time.Duration) *eventLog {
	return &eventLog{log: log, interval: interval, counts: map[eventKind]*eventCount{}}
}

// add counts one event from remote; msg is the line's message, code its
// kind.
func (l *eventLog) add(msg, code, remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[eventKind{msg, code}]
	if c == nil {
		c = &eventCount{}
		l.counts[eventKind{msg, code}] = c
	}
	c.n++
	c.lastRemote = remote
	if l.timer == nil && !l.closed {
		l.timer = time.AfterFunc(l.interval, l.flush)
	}
}

// flush writes the counts gathered since the last flush.
func (l *eventLog) flush() {
	l.mu.Lock()
	counts := l.counts
	l.counts, l.timer = map[eventKind]*eventCount{}, nil
	l.mu.Unlock()
	kinds := make([]eventKind, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b eventKind) int {
		return strings.Compare(a.msg+"\x00"+a.code, b.msg+"\x00"+b.code)
	})
	for _, k := range kinds {
		c := counts[k]
		l.log.Warn(k.msg, "code", k.code, "count", c.n, "last_remote", c.lastRemote, "interval", l.interval)
	}
}

// close writes what is counted and stops flushing; later events are
// counted but not written.
func (l *eventLog) close() {
	l.mu.Lock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.flush()
}
