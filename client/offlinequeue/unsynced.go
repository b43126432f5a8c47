package offlinequeue

import "time"

// Writes made without their own sync. A durable queue syncs every write
// before it returns, so a call that returned survives a power cut.
// MarkDoneUnsynced (File and SQLite) is the one exception, for a caller
// whose write can be lost to a power cut and learned again: the client's
// record of a write's outcome, which the server's ledger keeps (the write,
// pending again after the cut, is replayed and answered from the ledger).
// Such a write survives a process crash at once (it is in the file, in
// the kernel's cache) and a power cut once the file is synced: by the
// queue's next synced write, whose sync covers every byte written before
// it, or, when none comes within Options.UnsyncedWindow, by the queue
// itself (syncLater), counted by syncd_client_queue_deferred_syncs_total.
//
// Order: each queue is one file (SQLite: one write-ahead log) written in
// order and recovered as a prefix, so an unsynced write is never durable
// before a write made ahead of it (the enqueue of the item it marks done).

// syncLater runs a queue's sync one window after a write without a sync
// woke it, on a goroutine it owns; close stops it.
type syncLater struct {
	window  time.Duration
	sync    func() // syncs the file if a write since its last sync needs it
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
}

// startSyncLater starts the goroutine that calls sync one window after
// each wake.
func startSyncLater(window time.Duration, sync func()) *syncLater {
	l := &syncLater{window: window, sync: sync, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go l.run()
	return l
}

// wake says a write without a sync was made; a wake while one is pending
// is absorbed by it. Nil-safe.
func (l *syncLater) wake() {
	if l == nil {
		return
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *syncLater) run() {
	defer close(l.stopped)
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			return
		}
		t := time.NewTimer(l.window)
		select {
		case <-t.C:
			l.sync()
		case <-l.stop:
			t.Stop()
			return
		}
	}
}

// close stops the goroutine and waits for it; the caller syncs what is
// left. Nil-safe.
func (l *syncLater) close() {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.stopped
}
