package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// DecodeError says a record's value is not a JSON encoding of the
// Collection's type (another app version wrote it, say). errors.As finds
// it; Err is the encoding/json error.
type DecodeError struct {
	Model, Key string
	Value      json.RawMessage
	Err        error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("client: %s/%s: value does not decode: %v", e.Model, e.Key, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Collection is a typed view of one model whose values are JSON encodings
// of T, for apps that do not want to marshal by hand. It adds nothing to
// what it wraps: every method is the Client's of the same name, with T
// encoded by encoding/json on the way in and decoded on the way out, so
// offline writes, read-your-writes, outcomes and conflicts behave exactly
// as the package documentation says. It is safe for concurrent use.
type Collection[T any] struct {
	c     *Client
	model string
}

// NewCollection returns the typed view of model (a model name, see
// PROTOCOL.md 3.4; a bad one fails at the first write).
func NewCollection[T any](c *Client, model string) *Collection[T] {
	return &Collection[T]{c: c, model: model}
}

// Doc is one record of a Collection: its key, its decoded value and the
// Record fields an app renders.
type Doc[T any] struct {
	Key   string
	Value T
	// Version is the server version (for a pending write, the version it
	// was written over); pass it to PutIfVersion or DeleteIfVersion.
	Version uint64
	// Pending is true while the value is this device's write not yet
	// decided by the server.
	Pending bool
}

// Model is the model the collection views.
func (col *Collection[T]) Model() string { return col.model }

// Put writes v under key, as Client.Put; it returns the write's op id.
func (col *Collection[T]) Put(ctx context.Context, key string, v T) (string, error) {
	value, err := col.encode(key, v)
	if err != nil {
		return "", err
	}
	return col.c.Put(ctx, col.model, key, value)
}

// PutIfVersion writes v only if the server's record is still at version,
// as Client.PutIfVersion.
func (col *Collection[T]) PutIfVersion(ctx context.Context, key string, v T, version uint64) (string, error) {
	value, err := col.encode(key, v)
	if err != nil {
		return "", err
	}
	return col.c.PutIfVersion(ctx, col.model, key, value, version)
}

// Delete deletes key, as Client.Delete.
func (col *Collection[T]) Delete(ctx context.Context, key string) (string, error) {
	return col.c.Delete(ctx, col.model, key)
}

// DeleteIfVersion deletes key only if the server's record is still at
// version, as Client.DeleteIfVersion.
func (col *Collection[T]) DeleteIfVersion(ctx context.Context, key string, version uint64) (string, error) {
	return col.c.DeleteIfVersion(ctx, col.model, key, version)
}

// Get reads key from the local replica, as Client.Get. A value that does
// not decode as T is a *DecodeError (found is true: the record exists).
func (col *Collection[T]) Get(ctx context.Context, key string) (doc Doc[T], found bool, err error) {
	rec, found, err := col.c.Get(ctx, col.model, key)
	if err != nil || !found {
		return Doc[T]{}, found, err
	}
	doc, err = col.decode(rec)
	return doc, true, err
}

// List reads a key range from the local replica, as Client.List. Records
// whose values do not decode as T are left out, and the error then joins
// one *DecodeError for each: the ones that decode are still returned, so
// one foreign record does not hide the rest.
func (col *Collection[T]) List(ctx context.Context, o ListOptions) ([]Doc[T], error) {
	recs, err := col.c.List(ctx, col.model, o)
	if err != nil {
		return nil, err
	}
	docs := make([]Doc[T], 0, len(recs))
	var errs []error
	for _, rec := range recs {
		doc, err := col.decode(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		docs = append(docs, doc)
	}
	return docs, errors.Join(errs...)
}

// Change is one change of a Collection, as Watch delivers it.
type Change[T any] struct {
	Key string
	// Doc is the record as the local replica holds it when the change is
	// delivered (a later change of the same key may already be in it);
	// zero when Deleted.
	Doc Doc[T]
	// Deleted: the key is now absent or deleted.
	Deleted bool
	// Local is true for this device's own write.
	Local bool
	// Resync (the replica was replaced by a snapshot) and Lagged (the
	// watcher fell behind and changes were dropped) carry no key: re-list.
	Resync, Lagged bool
	// Err says the record could not be read, or did not decode (a
	// *DecodeError).
	Err error
}

// Watch delivers the collection's changes (as Client.Changes, filtered to
// its model, each with the record read back and decoded) until ctx ends or
// the Client is closed; then the channel is closed. A watcher that does
// not keep up gets a Change with Lagged set instead of the ones it missed:
// the client never waits for it.
func (col *Collection[T]) Watch(ctx context.Context) <-chan Change[T] {
	out := make(chan Change[T])
	sub := col.c.Changes()
	stop := context.AfterFunc(ctx, sub.Close) // ends the range below
	go func() {
		defer stop()
		defer close(out)
		defer sub.Close()
		for ev := range sub.C {
			if ev.Model != col.model && !ev.Resync && !ev.Lagged {
				continue
			}
			ch := Change[T]{Key: ev.Key, Deleted: ev.Deleted, Local: ev.Local, Resync: ev.Resync, Lagged: ev.Lagged}
			if ev.Key != "" && !ev.Deleted {
				var found bool
				ch.Doc, found, ch.Err = col.Get(ctx, ev.Key)
				ch.Deleted = !found && ch.Err == nil
			}
			select {
			case out <- ch:
			case <-ctx.Done():
				return
			case <-col.c.ctx.Done():
				return
			}
		}
	}()
	return out
}

func (col *Collection[T]) encode(key string, v T) (json.RawMessage, error) {
	value, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: %s/%s: encode: %w", col.model, key, err)
	}
	return value, nil
}

func (col *Collection[T]) decode(rec Record) (Doc[T], error) {
	doc := Doc[T]{Key: rec.Key, Version: rec.Version, Pending: rec.Pending}
	if err := json.Unmarshal(rec.Value, &doc.Value); err != nil {
		return Doc[T]{Key: rec.Key, Version: rec.Version, Pending: rec.Pending}, &DecodeError{Model: col.model, Key: rec.Key, Value: rec.Value, Err: err}
	}
	return doc, nil
}
