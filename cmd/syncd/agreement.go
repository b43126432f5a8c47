package main

import (
	"fmt"
	"os"

	"github.com/syncd-dev/syncd/replication/cluster"
)

// agreement is the configuration every node of a cluster must share, as
// cluster.Options.Agreement publishes it (the cluster adds the model
// declarations, the skew bound and the command key's fingerprint itself):
//   - "tokens": the token file's contents, read afresh at every report, so
//     a node whose file missed a revocation the others have refuses to
//     serve (and a file being replaced on every node is judged once it has
//     been replaced everywhere);
//   - "retention": the retention settings, which the lease holder's jobs
//     carry out on every node alike, and how often they run.
func agreement(o options) func() map[string]string {
	retention := fmt.Sprintf("%+v every %s", o.retention, o.retentionEvery)
	return func() map[string]string {
		tokens, err := os.ReadFile(o.tokens)
		if err != nil {
			tokens = []byte("unreadable: " + err.Error())
		}
		return map[string]string{"tokens": cluster.HashPart(tokens), "retention": cluster.HashPart([]byte(retention))}
	}
}
