package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// Exit codes of Main.
const (
	ExitPass  = 0 // every invariant held, coverage met, nothing found
	ExitFail  = 1 // the run completed and something failed: see the report
	ExitError = 2 // the run could not be carried out (bad flags, syncd would not start)
)

// Main is the soak command: it parses args, runs one soak and prints the
// verdicts and the report's path. It returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitPass
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return ExitError
	}
	cfg.Progress = stderr
	fmt.Fprintf(stderr, "soak: %v with %d syncd node(s) and %d clients, seed %d, state under %s\n", cfg.Duration, cfg.Nodes, cfg.Clients, cfg.Seed, cfg.Dir)
	res, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return ExitError
	}
	for _, v := range res.Check.Verdicts {
		mark := "holds"
		if !v.Holds {
			mark = fmt.Sprintf("VIOLATED (%d): %v", v.Violations, v.Evidence)
		}
		fmt.Fprintf(stdout, "invariant %d, %s: %s\n", int(v.Invariant), v.Invariant, mark)
	}
	for _, c := range res.Coverage {
		if !c.OK() {
			fmt.Fprintf(stdout, "coverage: %s injected %d times, %d required\n", c.Kind, c.Count, c.Required)
		}
	}
	for _, h := range res.Health {
		fmt.Fprintln(stdout, "harness:", h)
	}
	if !res.Quiesced {
		fmt.Fprintln(stdout, "quiescence: not reached")
	}
	verdict := "PASS"
	if !res.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(stdout, "soak %s (seed %d): report %s\n", verdict, res.Seed, res.ReportPath)
	if !res.Passed {
		return ExitFail
	}
	return ExitPass
}

func parseFlags(args []string, stderr io.Writer) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	faults := fs.String("faults", "all", "fault kinds on: all (with more than one node, also "+fmt.Sprint(ClusterFaults)+"), none, or a comma-separated list of "+fmt.Sprint(knownFaults))
	brk := fs.String("break", "", "deliberately break a component to see the checker catch it: forget-attempts, volatile-queue or ledger-amnesia")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long faults are injected (quiescence and the check follow)")
	fs.IntVar(&cfg.Clients, "clients", 20, "client processes")
	fs.IntVar(&cfg.Nodes, "nodes", 1, fmt.Sprintf("syncd processes; more than one (at most %d) runs a cluster with node kills and route cuts", MaxNodes))
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of every random choice (0: from the clock); the report names it")
	fs.StringVar(&cfg.Dir, "out", "var/soak", "directory under which the run's directory is created")
	fs.StringVar(&cfg.SyncdBinary, "syncd", "", "syncd binary to run (default: go build ./cmd/syncd)")
	fs.BoolVar(&cfg.BuildRace, "race", false, "when building syncd, build it with the race detector")
	fs.DurationVar(&cfg.FlapEvery, "flap-every", time.Second, "mean time between network flaps")
	fs.DurationVar(&cfg.ClientCrashEvery, "client-crash-every", 15*time.Second, "mean time between client crashes")
	fs.DurationVar(&cfg.SyncdCrashEvery, "syncd-crash-every", time.Minute, "mean time between syncd kills or restarts")
	fs.DurationVar(&cfg.WriteEvery, "write-every", 400*time.Millisecond, "mean time between two writes of one client")
	fs.IntVar(&cfg.Keys, "keys", 200, "keys per model")
	fs.IntVar(&cfg.HotKeys, "hot-keys", 4, "hot keys (a third of the writes)")
	fs.DurationVar(&cfg.MaxClockSkew, "max-clock-skew", 30*time.Second, "syncd's clock-skew bound (one client runs beyond it)")
	fs.DurationVar(&cfg.QuiesceTimeout, "quiesce-timeout", 3*time.Minute, "bound on the wait for every client to drain and catch up")
	fs.IntVar(&cfg.MinFlaps, "min-flaps", 300, "fewest network flaps for the run to count as covered")
	fs.DurationVar(&cfg.ProgressEvery, "progress-every", 10*time.Second, "interval of the progress line")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if *faults != "all" { // "all" is left to the defaults, which depend on the nodes
		if cfg.Faults, err = ParseFaults(*faults); err != nil {
			return cfg, err
		}
	}
	cfg.Break = Break(*brk)
	return cfg, cfg.setDefaults()
}
