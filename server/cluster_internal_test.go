package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication/cluster"
	"github.com/syncd-dev/syncd/syncproto"
)

// TestPushRefusalCodes: a push a cluster node does not take because it
// does not serve (its configuration out of agreement, its stream drifted)
// is answered server_busy, retryable on another node, never internal; a
// closing store is shutting_down; anything else internal.
func TestPushRefusalCodes(t *testing.T) {
	mismatch := &cluster.MismatchError{Parts: []string{"tokens"}}
	for _, c := range []struct {
		err  error
		want syncproto.Code
	}{
		{fmt.Errorf("submit: %w: %w", cluster.ErrNotServing, mismatch), syncproto.CodeServerBusy},
		{fmt.Errorf("submit: %w: %w", cluster.ErrNotServing, cluster.ErrStreamDeleted), syncproto.CodeServerBusy},
		{errStoreClosed, syncproto.CodeShuttingDown},
		{cluster.ErrOutcomeUnknown, syncproto.CodeInternal},
		{errors.New("disk full"), syncproto.CodeInternal},
	} {
		require.Equal(t, c.want, pushRefusalCode(c.err), "%v", c.err)
		require.True(t, c.want.Retryable(), "%s: a device resends it", c.want)
	}
}
