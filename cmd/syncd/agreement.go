package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/server/auth"
)

// agreement is the configuration every node of a cluster must share, as
// cluster.Options.Agreement publishes it (the cluster adds the model
// declarations, the skew bound and the command key's fingerprint itself):
//   - "tokens": the token file's contents, read afresh at every report,
//     and "tokens_generation" (cluster.GenerationPart), the generation in
//     it (auth.Generation), which every syncctl token issue/revoke and the
//     admin API bump: a node whose file is behind a peer's generation
//     (it missed a revocation, or the copy has not reached it yet) serves
//     on for --cluster-tokens-grace and refuses to serve after it; a node
//     whose file has the same generation as the others' but other
//     contents refuses as any part that differs from the majority's;
//   - "jwt_deny": the JWT deny list's contents, read afresh at every
//     report, and "jwt_deny_generation", the generation in it, which
//     every syncctl jwt revoke/allow and the admin API bump: judged as
//     "tokens" is (generationParts), so the node that has the newest
//     revocations is never outvoted by nodes the copy has not reached;
//     "off" (generation 0) when JWT verification is off;
//   - "jwt_jwks": the JWKS file's contents (--jwt-jwks-file) and
//     "jwt_jwks_generation", the generation in it (a "generation" member
//     beside "keys", which syncctl jwt keygen bumps at every rotation;
//     0 for a file without one, as an identity provider's): judged as
//     "tokens" is; "none" without a JWKS file, "off" without JWT;
//   - "jwt": the other settings that decide which JWTs the node admits
//     (jwtAgreement), so two nodes that would admit different tokens do
//     not both serve;
//   - "scopes": the partial sync declarations (--scope, --membership),
//     which every node's materializer applies (scope values, grants);
//   - "retention": the retention settings, which the lease holder's jobs
//     carry out on every node alike, and how often they run.
func agreement(o options) func() map[string]string {
	retention := fmt.Sprintf("%+v every %s", o.retention, o.retentionEvery)
	scopes := o.scopes.String()
	return func() map[string]string {
		parts := map[string]string{
			"jwt":       cluster.HashPart([]byte(o.jwt.agreement())),
			"scopes":    cluster.HashPart([]byte(scopes)),
			"retention": cluster.HashPart([]byte(retention)),
		}
		graded(parts, partTokens, readForAgreement(o.tokens))
		graded(parts, partJWTDeny, o.jwt.fileForAgreement(o.jwt.denyFile))
		graded(parts, partJWTJWKS, o.jwt.fileForAgreement(o.jwt.jwksFile))
		return parts
	}
}

// The agreement's parts that carry a generation.
const (
	// partTokens is the token file's part.
	partTokens = "tokens"
	// partJWTDeny is the JWT deny list's part.
	partJWTDeny = "jwt_deny"
	// partJWTJWKS is the JWKS file's part.
	partJWTJWKS = "jwt_jwks"
)

// generationParts are the parts of agreement whose file carries a
// generation (cluster.Options.Generations): a node behind a peer's serves
// for --cluster-tokens-grace, and the newest is never outvoted.
var generationParts = []string{partTokens, partJWTDeny, partJWTJWKS}

// graded sets part, one of generationParts, to the digest of data, a
// file's contents, and its generation part (cluster.GenerationPart) to
// the generation data carries (auth.Generation: 0 for a file written
// before generations, a missing or unreadable file).
func graded(parts map[string]string, part string, data []byte) {
	parts[part] = cluster.HashPart(data)
	parts[cluster.GenerationPart(part)] = strconv.FormatUint(auth.Generation(data), 10)
}

// fileForAgreement is what stands for one of the JWT files (the deny
// list, the JWKS file) in the agreement: its contents (readForAgreement),
// "none" when no such file is configured, or "off" when JWT verification
// is.
func (j *jwtOptions) fileForAgreement(path string) []byte {
	switch {
	case !j.enabled():
		return []byte("off")
	case path == "":
		return []byte("none")
	}
	return readForAgreement(path)
}

// agreement is the text of the JWT settings that decide which tokens a
// node admits, but for the deny list and the JWKS file (parts of their
// own, partJWTDeny and partJWTJWKS, judged by their generation): the
// verification rules (issuer, audience, algorithms, leeway, lifetime and
// size bounds), the claims a principal is read from, and the identity of
// the key source. The HS256 secret file is read afresh at every report
// and stands by its SHA-256, so a node that missed a rotation of the
// secret differs (a secret has no generation: it is the bare key, and a
// rotation of it has no order in which nodes admit the same tokens); a
// JWKS URL stands by the URL and its CA file's digest (the keys behind it
// are fetched by each node on its own schedule, within
// --jwt-jwks-refresh). The fetch schedule itself (refresh, min refresh,
// timeout) is not part of it: nodes may fetch at different paces and
// still admit the same tokens. "off" when JWT verification is off.
func (j *jwtOptions) agreement() string {
	if !j.enabled() {
		return "off"
	}
	var b strings.Builder
	field := func(name string, v any) { fmt.Fprintf(&b, "%s=%q\n", name, fmt.Sprint(v)) }
	file := func(name, path string) {
		if path == "" {
			field(name, "")
			return
		}
		field(name, cluster.HashPart(readForAgreement(path)))
	}
	field("issuer", j.issuer)
	field("audience", j.audience)
	if j.secretFile == "" {
		field("algorithms", j.algorithms) // ignored with a shared secret (HS256 only)
	}
	field("leeway", j.leeway)
	field("max_lifetime", j.maxLifetime)
	field("max_bytes", j.maxBytes)
	field("tenant_claim", j.tenantClaim)
	field("default_tenant", j.defaultTenant)
	field("read_claim", j.readClaim)
	field("write_claim", j.writeClaim)
	field("scopes_claim", j.scopesClaim)
	field("client_id_claim", j.clientIDClaim)
	field("jwks_url", j.jwksURL)
	file("jwks_ca", j.jwksCA)
	file("hs256_secret", j.secretFile)
	return b.String()
}

// readForAgreement reads a file whose contents the nodes must share; one
// that cannot be read stands by why (missing, or the error without its
// path, which may differ between nodes), unlike any readable file.
func readForAgreement(path string) []byte {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return []byte("missing\x00")
	}
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return []byte("unreadable\x00" + err.Error())
	}
	return data
}

// agreementAbsent is what a node of a release before a part of agreement
// stands for in it (cluster.Options.AgreementAbsent): a release before
// partial sync declares no scopes, so a node of this release that declares
// some does not serve beside one (its materializer would decide writes of
// scoped models differently). "jwt" has no such value: the releases before
// it verified JWTs by settings they did not publish, which are compared
// only among the nodes that publish them.
func agreementAbsent() map[string]string {
	var none replication.Scopes
	return map[string]string{"scopes": cluster.HashPart([]byte(none.String()))}
}
