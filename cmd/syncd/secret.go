package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/syncd-dev/syncd/replication/cluster"
)

// clusterSecretCmd is the subcommand that creates a cluster secret.
const clusterSecretCmd = "cluster-secret"

// runClusterSecret is `syncd cluster-secret --out FILE`: it writes a new
// cluster secret (32 random bytes, hex) to FILE with mode 0600 and prints
// its fingerprint, which every node logs at start. It never replaces an
// existing file: a node given a new secret is cut off from its cluster.
func runClusterSecret(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("syncd "+clusterSecretCmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "file to create (mode 0600; refused if it exists); copy it to every node of the cluster and pass it as --cluster-secret")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments: %q", clusterSecretCmd, fs.Args())
	}
	if *out == "" {
		return fmt.Errorf("%s: --out FILE is required", clusterSecretCmd)
	}
	s, err := cluster.NewSecret()
	if err != nil {
		return err
	}
	if err := cluster.WriteSecretFile(*out, s); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote a new cluster secret to %s (fingerprint %s); copy it to every node and start each with --cluster-secret %s\n", *out, s.Fingerprint(), *out)
	return nil
}
