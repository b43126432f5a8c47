//go:build !race

package synccore

const raceEnabled = false
