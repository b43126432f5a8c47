package adminapi_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestUserOfClientID(t *testing.T) {
	long := strings.Repeat("a", 41)
	hashed, err := syncproto.DeviceClientID(long, "phone")
	require.NoError(t, err)
	for id, want := range map[string]string{
		"alice:phone":  "alice",
		"a.b-c_d:x":    "a.b-c_d",
		"dev-a":        "", // a token-file client id, in no namespace
		"alice:":       "", // no device part
		":phone":       "",
		hashed:         "", // a digest namespace does not name its user
		"_abc:phone":   "",
		"":             "",
		"al:ice:phone": "al",
	} {
		require.Equal(t, want, adminapi.UserOfClientID(id), id)
	}
}
