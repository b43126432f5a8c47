package buildinfo_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/buildinfo"
)

func TestStringNamesVersionRevisionAndDirt(t *testing.T) {
	for _, c := range []struct {
		info buildinfo.Info
		want string
	}{
		{buildinfo.Info{Version: "v1.4.0"}, "v1.4.0"},
		{buildinfo.Info{Version: "(devel)", Revision: "0123456789abcdef0123"}, "(devel)+0123456789ab"},
		{buildinfo.Info{Version: "v0.0.0-20261204142300-0123456789ab", Revision: "0123456789abcdef0123"}, "v0.0.0-20261204142300-0123456789ab"},
		{buildinfo.Info{Version: "v1.4.0", Revision: "0123456789abcdef0123", Modified: true}, "v1.4.0+0123456789ab-dirty"},
	} {
		require.Equal(t, c.want, c.info.String())
	}
}

func TestReadKnowsTheToolchain(t *testing.T) {
	got := buildinfo.Read()
	require.NotEmpty(t, got.Version)
	require.Contains(t, got.GoVersion, "go1.")
}
