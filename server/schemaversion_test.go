package server_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
)

// TestSchemaVersionIsReported: the admin status and syncd_database_info
// name the database's schema version beside its id.
func TestSchemaVersionIsReported(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{DataPath: filepath.Join(t.TempDir(), "syncd.db")})
	st := srv.Status(t)
	require.Equal(t, replication.SchemaVersion(), st.SchemaVersion)
	series := fmt.Sprintf(`syncd_database_info{database_id=%q,schema_version="%d"}`, st.DatabaseID, replication.SchemaVersion())
	require.Equal(t, "1", srv.Metric(t, series))
}
