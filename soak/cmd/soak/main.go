// Command soak runs syncd's soak harness: clients and syncd as child
// processes, network flaps, crashes and restarts, then the invariant
// checker and a report under var/soak/. See package soak, and `make soak`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/syncd-dev/syncd/soak"
)

func main() {
	if code, isChild := soak.Child(); isChild {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(soak.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
