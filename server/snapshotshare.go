package server

import (
	"context"
	"errors"
	"io"
	"sync"
)

// A snapshot storm (hundreds of devices bootstrapping at once after an
// outage or a release) asks for the same records many times over. When a
// device's turn comes, every device of the same scope still waiting in the
// queue joins its read instead of waiting for a read of its own: one
// database read and one encoding serve them all. Joining keeps what a
// snapshot of one's own promises: the read begins after every joiner
// arrived, so it holds every write acknowledged before any of them asked.
// (A body cached from an earlier read would not.)
//
// The read's body is kept in chunks until every reader has written them to
// its connection, at most a snapshotShare's limit in bytes: the read waits
// while its slowest reader is that far behind, so a reader that stalls
// holds the others back until its per-write deadline cuts it.

// errNoReaders ends a shared read whose readers have all gone.
var errNoReaders = errors.New("every reader of the snapshot has gone")

// snapshotShare is one snapshot read served to several readers. The read
// writes the body (Write, then finish); each reader takes it chunk by
// chunk (shareReader.next). It is safe for concurrent use.
type snapshotShare struct {
	limit int // bytes kept at most

	mu      sync.Mutex
	chunks  [][]byte // the body from chunk first on
	first   int
	kept    int // bytes in chunks
	done    bool
	err     error // why the read failed, once done
	readers map[*shareReader]struct{}
	// grown is closed (and replaced) when the body grows or ends, which
	// readers wait for; freed when chunks are dropped or a reader goes,
	// which the read waits for. Each wakes only who needs it.
	grown, freed chan struct{}
}

func newSnapshotShare(limit int) *snapshotShare {
	return &snapshotShare{limit: limit, readers: map[*shareReader]struct{}{}, grown: make(chan struct{}), freed: make(chan struct{})}
}

// shareReader is one reader's place in a snapshotShare.
type shareReader struct {
	share *snapshotShare
	at    int // index of the next chunk to take
}

// reader adds a reader at the start of the body.
func (s *snapshotShare) reader() *shareReader {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &shareReader{share: s, at: s.first}
	s.readers[r] = struct{}{}
	return r
}

// signal wakes whoever waits on *ch.
func signal(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}

// Write appends a copy of p to the body, first waiting (or until ctx
// ends) while the body kept is at the limit. It fails with errNoReaders
// once every reader has gone.
func (s *snapshotShare) Write(ctx context.Context, p []byte) error {
	chunk := append([]byte(nil), p...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if len(s.readers) == 0 {
			return errNoReaders
		}
		if s.kept+len(chunk) <= s.limit || s.kept == 0 {
			break
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			s.mu.Lock()
			return ctx.Err()
		}
		s.mu.Lock()
	}
	s.chunks = append(s.chunks, chunk)
	s.kept += len(chunk)
	signal(&s.grown)
	return nil
}

// finish ends the body: whole when err is nil, else cut short by err.
func (s *snapshotShare) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done, s.err = true, err
	signal(&s.grown)
}

// trimLocked drops the chunks every reader has taken, and wakes the read
// when it did.
func (s *snapshotShare) trimLocked() {
	low := s.first + len(s.chunks)
	for r := range s.readers {
		low = min(low, r.at)
	}
	if s.first == low {
		return
	}
	for s.first < low {
		s.kept -= len(s.chunks[0])
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.first++
	}
	signal(&s.freed)
}

// next returns the reader's next chunk, waiting for it (or until ctx
// ends). It returns io.EOF after the last chunk of a whole body, and the
// read's error after the last chunk of one cut short.
func (r *shareReader) next(ctx context.Context) ([]byte, error) {
	s := r.share
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if i := r.at - s.first; i < len(s.chunks) {
			chunk := s.chunks[i]
			r.at++
			if i == 0 { // it may have been the last reader of that chunk
				s.trimLocked()
			}
			return chunk, nil
		}
		if s.done {
			if s.err != nil {
				return nil, s.err
			}
			return nil, io.EOF
		}
		grown := s.grown
		s.mu.Unlock()
		select {
		case <-grown:
		case <-ctx.Done():
			s.mu.Lock()
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
}

// close removes the reader; the chunks only it still needed are dropped.
func (r *shareReader) close() {
	s := r.share
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.readers, r)
	s.trimLocked()
	if len(s.readers) == 0 {
		signal(&s.freed) // the read stops
	}
}

// shareWriter is the io.Writer the read's SnapshotWriter writes to.
type shareWriter struct {
	ctx   context.Context
	share *snapshotShare
}

func (w shareWriter) Write(p []byte) (int, error) {
	if err := w.share.Write(w.ctx, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
