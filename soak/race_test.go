//go:build race

package soak_test

// raceEnabled: this test binary runs with the race detector, so syncd is
// built with it too.
const raceEnabled = true
