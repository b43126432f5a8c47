package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/internal/buildinfo"
)

func TestVersionNamesBothBuilds(t *testing.T) {
	local := newCLI(t, nil)
	var alone versionView
	decodeStrict(t, local.ok("version", "--json"), &alone)
	require.Equal(t, versionView{Syncctl: buildinfo.Read().String(), GoVersion: buildinfo.Read().GoVersion}, alone, "no server asked, none called")

	ts := startServer(t, serverOptions{})
	c := newCLI(t, ts.adminEnv())
	var both versionView
	decodeStrict(t, c.ok("version", "--json"), &both)
	require.Equal(t, buildinfo.Read().String(), both.Server, "the syncd of this test links the same build")
	require.Regexp(t, `(?m)^server\s+\S+`, c.ok("version"))

	var st statusView
	decodeStrict(t, c.ok("status", "--json"), &st)
	require.Equal(t, both.Server, st.Build)
	require.NotEmpty(t, st.DatabaseID)
}
