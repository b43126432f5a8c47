// Command syncd is the syncd server: it applies mutations from offline-first
// clients, deduplicates replays and serves the change feed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, errShowVersion) {
		fmt.Println(versionLine())
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncd:", err)
		os.Exit(1)
	}
}
