//go:build race

package synccore

// raceEnabled scales the simulation down under the race detector, which
// slows it about tenfold; `make simulate` runs without it.
const raceEnabled = true
