// Command syncctl is syncd's operator CLI: it answers "what is happening and
// why" from a running server's admin API, from a device's queue file, and
// from syncd's token file, and it can act as a small client for trying
// things out.
//
//	syncctl status | clients | oplog tail | conflicts ls | ledger get OP_ID
//	syncctl queue stats|ls|dead|requeue|purge --path FILE
//	syncctl explain --path FILE --tenant T
//	syncctl token issue|ls|revoke
//	syncctl put|get|watch
//
// Every command prints an aligned table for people and JSON with --json.
// The exit status says what went wrong (see exitCodes in run.go and
// docs/operations.md): 0 success, 1 failure, 2 usage, 3 server unreachable,
// 4 token refused, 5 not found, 6 bad file, 7 write not applied,
// 130 interrupted.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	os.Exit(ExitCode(Run(ctx, os.Args[1:], os.Stdout, os.Stderr)))
}
