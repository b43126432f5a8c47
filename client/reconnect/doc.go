// Package reconnect brings the client back into sync when the network
// returns: it runs the caller's four steps, reconnect, activate, bind and
// replay, strictly in that order, retries with backoff, and stops the moment
// the network is reported gone. It owns the ordering, the retry loop and the
// cancellation; the steps themselves (dialing, the handshake, the sync
// worker) belong to the caller. It imports nothing from syncd.
//
// # Use
//
//	coord, err := reconnect.New(reconnect.Steps{
//		Reconnect: dial, Activate: activate, Bind: bind, Replay: replay,
//	}, reconnect.Config{OnOutcome: report, Registerer: reg})
//
//	events, unsubscribe := monitor.Subscribe() // package netmonitor
//	var last uint64
//	for ev := range events {
//		if ev.State == netmonitor.Offline || ev.Seq > last+1 {
//			coord.OnOffline() // also drops a connection an unseen Offline broke
//		}
//		if ev.State == netmonitor.Online {
//			coord.OnOnline()
//		}
//		last = ev.Seq
//	}
//	coord.Close()
//
// The caller's duties:
//  1. Supply all four steps (New refuses a missing one) and make each honour
//     its context: cancellation is how a run is stopped.
//  2. Make Reconnect discard the transport of a previous attempt: after a
//     failed activate or bind the next attempt starts over at reconnect.
//  3. Call OnOnline and OnOffline from the monitor's events, and OnOffline
//     then OnOnline when the active transport breaks while the network stays
//     up. Both return at once; neither needs its own goroutine.
//  4. Call Close once, not from OnOutcome.
//
// # What it promises
//
//   - Order. Within a run, a step starts only after the previous one
//     succeeded: Replay never runs before Bind, Bind never before Activate.
//     A failure of reconnect, activate or bind ends that attempt and, after
//     a backoff wait, the next attempt starts over at reconnect, since a
//     transport that could not be activated or bound is not trusted.
//   - Cancellation that cannot be held up. OnOffline cancels the run's
//     context and returns; it never waits for the run. The coordinator's
//     mutex guards a few fields and is never held across a step, a backoff
//     wait or OnOutcome, so a flap back offline cuts a run short during a
//     step (the step sees its context end), between steps, or in the middle
//     of a wait, not at the end of the retry loop.
//   - No replay into a dead connection. The context is checked after Bind
//     returns and before Replay starts; once it has ended Replay is not
//     called, and the run ends Aborted with cause ErrOffline (or ErrClosed).
//   - An outcome that says what happened. Reconnected always means Replay
//     was called and returned; ReplayErr says whether it completed
//     (Outcome.Synced). A run stopped before Replay is Aborted, never
//     Reconnected, and one stopped during Replay is Aborted with ReplayRan
//     set. GaveUp carries the last failure as a *StepError.
//   - Backoff: the wait after the n-th failed attempt is uniform in
//     [C/2, C] for C = min(Cap, Base*2^(n-1)), raised to twice a server's
//     retry hint when that is more (Backoff.Wait, the client's one jitter
//     rule), and a wait is cut short by cancellation. No wait follows the attempt that makes a run give up.
//   - One run per online period. OnOnline while a run is in progress, or
//     after a run reconnected, starts nothing. After OnOffline the next
//     OnOnline starts a fresh run, which first lets the cancelled one
//     return, so two runs never call the steps at the same time. Outcomes
//     reach OnOutcome one at a time, in the order the runs started.
//   - Close cancels any run, waits for its goroutine and its outcome, and
//     starts no more.
//
// Runs retry until cancelled by default (Config.MaxAttempts 0), because a
// run that gave up on a working network would not be retried: the monitor
// does not report Online twice in a row.
//
// # Metrics
//
// With Config.Registerer set:
//
//	syncd_client_reconnect_attempts_total                              counter calls to Reconnect
//	syncd_client_reconnect_outcomes_total{result="reconnected|gave_up|aborted"} counter runs by result
//	syncd_client_replay_runs_total{result="completed|failed|aborted"}  counter replays started by runs
//	syncd_client_reconnect_step_failures_total{step="reconnect|activate|bind"}  counter failed attempts by step
package reconnect
