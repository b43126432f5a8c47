package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/internal/atomicfile"
	"github.com/syncd-dev/syncd/server/auth"
)

// keygenView is the --json output of syncctl jwt keygen.
type keygenView struct {
	Kid  string `json:"kid"`
	Alg  string `json:"alg"`
	Key  string `json:"key"`
	JWKS string `json:"jwks"`
}

func (a *app) jwtKeygenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keygen [--alg ES256] [--dir var/jwt]",
		Short: "Make a signing key and publish its public half in a JWKS file",
		Long: `Generate a private signing key (DIR/signing-key.pem, mode 0600) and add its
public key to DIR/jwks.json, the file syncd --jwt-jwks-file reads. Keys already
in jwks.json stay there, so running keygen again rotates: tokens signed with
the old key stay valid while it is listed. syncd reads the JWKS again on its
refresh interval, and at once for a token whose kid it does not know.

Every run bumps the file's generation (a "generation" member beside "keys").
On a cluster whose nodes read their own copies, copy the whole file to every
node within syncd --cluster-tokens-grace: a node with an older generation
serves until the grace is over, then stops (docs/operations.md, Tokens on a
cluster).`,
		Args: exactArgs(0, "no arguments"),
	}
	alg := cmd.Flags().String("alg", "ES256", "RS256, ES256 or EdDSA")
	dir := cmd.Flags().String("dir", defaultJWTDir, "directory of signing-key.pem and jwks.json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		k, err := auth.GenerateSigningKey(*alg)
		if err != nil {
			return failf(exitUsage, "jwt keygen: %v", err)
		}
		keyPath, jwksPath := filepath.Join(*dir, "signing-key.pem"), filepath.Join(*dir, "jwks.json")
		pemBytes, err := auth.MarshalSigningKey(k)
		if err != nil {
			return failf(exitFailure, "jwt keygen: %v", err)
		}
		doc, err := withPublishedKey(jwksPath, k)
		if err != nil {
			return failf(exitFailure, "jwt keygen: %v", err)
		}
		// Each file is replaced whole (a syncd reading jwks.json on its
		// schedule never reads half of one): the key first, so a JWKS that
		// publishes it never names a key that was not kept.
		if err := atomicfile.Write(keyPath, pemBytes, 0o600, 0o750); err != nil {
			return failf(exitFailure, "jwt keygen: %v", err)
		}
		if err := atomicfile.Write(jwksPath, doc, 0o644, 0o750); err != nil {
			return failf(exitFailure, "jwt keygen: %v", err)
		}
		if a.json {
			return printJSON(a.stdout, keygenView{Kid: k.Kid, Alg: k.Alg, Key: keyPath, JWKS: jwksPath})
		}
		_, err = fmt.Fprintf(a.stdout, "signing key %s (%s, kid %s)\npublic JWKS %s: start syncd with --jwt-jwks-file %s --jwt-issuer %s --jwt-audience %s\n",
			keyPath, k.Alg, k.Kid, jwksPath, jwksPath, defaultJWTIssuer, defaultJWTAudience)
		return err
	}
	return cmd
}

// withPublishedKey is the JWKS at path (if any) with k's public key added,
// at the next generation: a "generation" member beside "keys" (RFC 7517
// lets a JWK Set carry members its readers ignore), which cluster nodes
// that read copies of the file compare to tell which is newer (syncd's
// configuration agreement). A file without one is generation 0.
func withPublishedKey(path string, k auth.SigningKey) ([]byte, error) {
	fresh, err := auth.JWKS(k)
	if err != nil {
		return nil, err
	}
	var doc, add struct {
		Generation uint64            `json:"generation,omitempty"`
		Keys       []json.RawMessage `json:"keys"`
	}
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(old, &doc); err != nil {
			return nil, fmt.Errorf("%s is not a JWKS document: %w", path, err)
		}
	}
	if doc.Generation == math.MaxUint64 {
		return nil, fmt.Errorf("%s: generation %d is the largest there is (the file was edited by hand): write one with a generation below it", path, doc.Generation)
	}
	if err := json.Unmarshal(fresh, &add); err != nil {
		return nil, err
	}
	doc.Generation++
	doc.Keys = append(doc.Keys, add.Keys...)
	return json.MarshalIndent(doc, "", "  ")
}
