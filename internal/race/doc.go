// Package race reports whether the binary was built with the race
// detector (go test -race), so tests that prove a figure at scale can run
// at a smaller scale under it, which slows them five to tenfold; make test
// runs them again at full scale without it.
package race
