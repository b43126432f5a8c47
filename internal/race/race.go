//go:build race

package race

// Enabled: this binary runs with the race detector.
const Enabled = true
