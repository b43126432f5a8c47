package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/syncd-dev/syncd/internal/textsafe"
)

// Exit statuses. Scripts may rely on them; docs/operations.md lists them.
const (
	exitOK           = 0   // the command did what it was asked
	exitFailure      = 1   // anything not covered below
	exitUsage        = 2   // bad flags or arguments; nothing was done
	exitUnreachable  = 3   // the server (or its admin API) could not be reached
	exitUnauthorized = 4   // the server refused the token
	exitNotFound     = 5   // a file, op id or token id does not exist
	exitBadFile      = 6   // not a queue, a corrupt queue, a locked queue, not a token file, a bad backup
	exitNotApplied   = 7   // put: the server decided against the write
	exitInterrupted  = 130 // SIGINT or SIGTERM; what was done is consistent
)

// cliError is an error with the exit status it maps to.
type cliError struct {
	code int
	err  error
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

// failf returns an error with exit status code.
func failf(code int, format string, args ...any) error {
	return &cliError{code: code, err: fmt.Errorf(format, args...)}
}

// ExitCode maps an error returned by Run to the process exit status.
func ExitCode(err error) int {
	if err == nil {
		return exitOK
	}
	if ce, ok := errors.AsType[*cliError](err); ok {
		return ce.code
	}
	if errors.Is(err, context.Canceled) {
		return exitInterrupted
	}
	return exitFailure
}

// Run runs syncctl with args (without the program name), writing results
// to stdout and messages, progress and errors to stderr. It prints a failed
// command's error as one line on stderr and returns it; ExitCode turns it
// into the exit status. Cancelling ctx (SIGINT) stops long commands at a
// consistent point.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := &app{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now, isTerminal: isTerminal}
	return a.run(ctx, args)
}

// app is one run of syncctl and what it talks to. Tests build one with a
// fixed clock and environment.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time
	isTerminal     func(io.Writer) bool

	json    bool // --json
	started bool // flags and arguments were accepted and a command ran
}

func (a *app) run(ctx context.Context, args []string) error {
	root := a.rootCommand()
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	_, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*cliError](err); !ok && !a.started {
		err = &cliError{code: exitUsage, err: err}
	}
	fmt.Fprintln(a.stderr, "syncctl: "+oneLine(err.Error()))
	return err
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return textsafe.Escape(strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " "))
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "syncctl",
		Short: "Inspect and operate syncd: server state, device queues, tokens",
		Long: `syncctl inspects and operates syncd.

Server commands (status, clients, oplog, conflicts, ledger, explain) call the
admin API: --server (SYNCCTL_SERVER, default ` + defaultAdminURL + `) with an
admin token (SYNCCTL_TOKEN). Queue commands open a device's queue file
(NDJSON or SQLite, detected) without a running client. Token commands edit
syncd's token file. put, get and watch act as a small client.

Every command prints a table for people, or JSON with --json.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// Cobra checks required flags after this hook; check them
			// first, so a missing one is a usage error like any other.
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return failf(exitUsage, "%v (see %s --help)", err, cmd.CommandPath())
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return failf(exitUsage, "%v (see %s --help)", err, cmd.CommandPath())
			}
			a.started = true
			return nil
		},
	}
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print JSON for scripts instead of tables")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return failf(exitUsage, "%v (see %s --help)", err, cmd.CommandPath())
	})
	root.AddCommand(
		a.statusCommand(),
		a.clientsCommand(),
		a.oplogCommand(),
		a.conflictsCommand(),
		a.ledgerCommand(),
		a.queueCommand(),
		a.explainCommand(),
		a.scopesCommand(),
		a.tokenCommand(),
		a.jwtCommand(),
		a.putCommand(),
		a.getCommand(),
		a.watchCommand(),
		a.benchCommand(),
		a.restoreCommand(),
		a.versionCommand(),
		a.backupCommand(),
	)
	return root
}

// group returns a command that only holds subcommands: run without one, or
// with an unknown one, it is a usage error.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return failf(exitUsage, "unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return failf(exitUsage, "%s needs a subcommand (see %s --help)", cmd.CommandPath(), cmd.CommandPath())
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// groupWithDefault returns a command group that, run without a
// subcommand, does what its obvious subcommand does, with that
// subcommand's flags: syncctl conflicts lists like syncctl conflicts ls.
// def builds the subcommand; it is built twice, once as the group itself.
func groupWithDefault(use, short string, def func() *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd := def()
	sub := cmd.Name()
	cmd.Use, cmd.Aliases = use, nil
	cmd.Short = short + " (alone: " + sub + ")"
	cmd.AddCommand(append([]*cobra.Command{def()}, subs...)...)
	return cmd
}

// exactArgs is cobra.ExactArgs with a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return failf(exitUsage, "%s takes %s, got %d argument(s) (see %s --help)", cmd.CommandPath(), names, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// setting returns a flag's value when it was given, else the environment
// variable's when set, else the flag's default. Secrets (tokens) are never
// flag defaults, so --help cannot show them.
func (a *app) setting(flags *pflag.FlagSet, name, env string) string {
	f := flags.Lookup(name)
	if f.Changed {
		return f.Value.String()
	}
	if v := a.getenv(env); v != "" {
		return v
	}
	return f.Value.String()
}

// interrupted reports whether err is the end of ctx (SIGINT or SIGTERM).
func interrupted(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}
