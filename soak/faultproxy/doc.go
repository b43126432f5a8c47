// Package faultproxy is an in-process TCP proxy that tests put between a syncd
// client and a syncd server to break the network on command: silence it, reset
// it, slow it, starve it, or cut a connection after an exact number of bytes.
//
// It is a mechanism, not a scheduler. It holds no randomness and no plan: the
// caller decides when each fault starts and ends (a soak harness from its own
// seeded RNG, an end-to-end test step by step), and the proxy applies it at once
// to the connections that the fault's method names.
//
// # What it owns
//
// New opens one listener on loopback (a non-loopback address is refused with
// ErrNotLoopback) and dials the target once per accepted connection. The proxy
// owns the listener, both sockets of every proxied connection, and every
// goroutine that moves their bytes: a reader and a writer per direction. Close
// resets every live connection and returns only when all of those goroutines
// have stopped; timers behind a delay or a throttle stop with it.
//
// # Faults
//
// Direction Up is client to server, Down is server to client.
//
//	Fault               New connections                 Live connections
//	SetMode(Pass)       forwarded                       flow again, unless tainted (below)
//	SetMode(Blackhole)  accepted, never dialed, silent  bytes read and discarded: silence, no error
//	SetMode(Refuse)     reset on accept                 unaffected (add ResetAll for an outage)
//	ResetAll()          unaffected                      reset towards both peers
//	SetDelay(up, down)  each chunk waits its delay      same, from the next chunk read
//	SetThrottle(bps)    paced, shared per direction     same, from the next piece written
//	CutAfter(dir, n)    unaffected                      n more bytes in dir, then reset
//	CutNextAfter(d, n)  the next one: n bytes, reset    unaffected
//	SetTarget(addr)     dialed at addr                  keep their upstream
//
// A blackhole never delivers a stream with a hole in it. A live connection that
// loses even one byte (or its FIN) to the blackhole is tainted: it stays silent
// for the rest of its life, as a connection whose path died does, until a peer
// closes it, ResetAll or Close. A live connection that was idle through the
// whole blackhole lost nothing and resumes when Pass returns.
//
// Refuse cannot make a TCP handshake fail, because the kernel completes it
// before the proxy accepts. A refused client sees a reset instead: either its
// dial fails with "connection reset by peer" or its first read or write does.
//
// A cut forwards the first n bytes in its direction and resets the connection
// when byte n+1 reaches the proxy; that byte is never forwarded. So
// CutNextAfter(Down, 0), armed before a client connects, or CutAfter(Down, 0) on
// a live session, lets the request through, lets the server commit it, and loses
// the acknowledgement: the client must treat the outcome as unknown. Before
// resetting, a cut waits (up to one second, on Linux) until the peer's kernel
// has acknowledged the forwarded bytes, so exactly n arrive; bytes a reader
// leaves unread for longer than that may be lost with the reset.
//
// Delay is latency, not bandwidth: a chunk is due when it was read plus the
// delay in force then, chunks in flight wait concurrently, and bytes are never
// reordered. Throttle caps each direction's bytes per second summed over the
// proxy's connections, like one device's link; give each simulated device its
// own proxy when their links must be independent.
//
// Close and ResetAll reset rather than close, so no peer mistakes the proxy
// going away for an orderly shutdown by the other side. A reset discards bytes
// the proxy had read but not yet written, like packets in flight.
//
// # The caller's duties
//
//  1. Close every proxy, typically in t.Cleanup; until then its goroutines and
//     sockets stay alive.
//  2. Draw any randomness (when to flap, which fault, how long) from your own
//     seeded RNG and log the seed, so a failing run can be replayed.
//  3. Wait for a fault's effect through the peers (an error, a timeout) or
//     through Stats polled with a bound, never with a sleep.
//  4. Combine faults for the outage you mean: SetMode(Refuse) then ResetAll for
//     a server that is down; SetMode(Blackhole) for a path that silently died;
//     CutAfter or CutNextAfter with Down and 0 for "committed, ack lost".
//  5. Point clients at Addr, not at the server, and keep the proxy for the
//     whole run (or pass the same ListenAddr to a new one) if clients hold the
//     address in their configuration.
//
// Every method is safe for concurrent use, also after Close, when the fault
// methods no longer affect anything. Invalid arguments (a negative delay, rate
// or byte count, an unknown Mode or Direction) are programming errors and
// panic.
package faultproxy
