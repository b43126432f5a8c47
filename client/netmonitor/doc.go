// Package netmonitor decides whether the syncd server is reachable, by
// probing it in a loop, and tells subscribers when that decision changes.
// It owns one probe loop per Monitor and nothing else: it never connects,
// reconnects or replays (package reconnect sequences that), and it imports
// nothing from syncd.
//
// # Use
//
//	probe, err := netmonitor.HTTPProbe(httpClient, "https://sync.example.com/healthz")
//	mon, err := netmonitor.New(netmonitor.Config{Probe: probe, Registerer: reg})
//	events, unsubscribe := mon.Subscribe()
//	err = mon.Start(ctx)
//	for ev := range events { ... }      // Online / Offline decisions
//	mon.Close()                         // stops, waits, closes events
//
// The caller's duties:
//  1. Give a Probe that honours its context. The monitor cancels it at
//     Config.Timeout and counts the timeout as a failure at once, but it will
//     not start a second probe while the first is still running, and Close
//     waits for it.
//  2. Read the subscription, or unsubscribe. An unread channel costs one
//     buffered event and never slows the loop, but it is still a reference.
//  3. Treat a gap in Event.Seq as "something happened while I was not
//     looking": an Online event whose Seq jumped by two or more hides an
//     Offline, so a connection opened before it is suspect.
//  4. Call Close (or cancel Start's context) exactly when done; Close waits.
//
// # What it promises
//
//   - A probe at start. Start probes immediately, with no initial wait, and
//     the first result decides the state directly: Unknown becomes Online or
//     Offline after one probe, and subscribers receive that decision as an
//     event (Seq 1). An app that starts offline hears Offline within one
//     probe Timeout, not after an interval times a threshold, and an app that
//     starts online hears Online, so the first connect needs no special case
//     at boot. Thresholds do not apply to the first result because they exist
//     to keep a known state from flapping on a blip; before the first probe
//     there is no known state to protect, and waiting for a threshold would
//     only leave the app guessing. A wrong first call caused by a blip is
//     corrected by the ordinary thresholds a few seconds later.
//   - Hysteresis after that: FailureThreshold consecutive failures to go
//     Offline, SuccessThreshold consecutive successes to go Online. While a
//     threshold is being counted the loop probes every ConfirmInterval
//     instead of every Interval, so confirming a change costs seconds, not
//     whole intervals. With the defaults (5s, 1s, 2, 2) an outage is reported
//     at most about 5s + 1s + two Timeouts after it begins.
//   - Failures are failures, whatever form they take: a returned error, a
//     panic (recovered as *PanicError; the loop keeps going), or no answer
//     within Timeout (ErrProbeTimeout).
//   - Nothing slow runs on the probe loop. Subscribers get events through a
//     one-slot coalescing channel: the loop replaces an unread event instead
//     of waiting, so a stalled subscriber cannot make the monitor blind, and
//     it still receives the latest decision when it reads. No user callback
//     ever runs on the loop.
//   - One clock: Config.After. The package never calls time.Now or
//     time.Sleep, so tests step the loop with a fake.
//   - Close cancels the loop and any running probe, waits for both, closes
//     every subscription and makes Wait return ErrClosed. It is idempotent.
//
// # Metrics
//
// With Config.Registerer set:
//
//	syncd_client_network_online                                 gauge   1 online, 0 offline or unknown
//	syncd_client_probe_total{result="ok|fail"}                  counter probes by result
//	syncd_client_network_transitions_total{to="online|offline"} counter decisions, the first one included
package netmonitor
