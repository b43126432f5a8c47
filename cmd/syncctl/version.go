package main

import (
	"github.com/spf13/cobra"

	"github.com/syncd-dev/syncd/internal/buildinfo"
)

// versionView is the --json output of syncctl version.
type versionView struct {
	Syncctl   string `json:"syncctl"`
	GoVersion string `json:"go_version"`
	// Server is the build of the syncd at --server, when asked.
	Server string `json:"server,omitempty"`
}

func (a *app) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show syncctl's build, and with --server the build of that syncd",
		Args:  exactArgs(0, "no arguments"),
	}
	o := addAdminFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		b := buildinfo.Read()
		v := versionView{Syncctl: b.String(), GoVersion: b.GoVersion}
		if cmd.Flags().Changed("server") || a.getenv("SYNCCTL_SERVER") != "" {
			c, err := a.adminClient(cmd, o)
			if err != nil {
				return err
			}
			st, err := fetchStatus(cmd.Context(), c)
			if err != nil {
				return err
			}
			v.Server = st.Build
		}
		if a.json {
			return printJSON(a.stdout, v)
		}
		rows := [][2]string{{"syncctl", v.Syncctl}, {"go", v.GoVersion}}
		if v.Server != "" {
			rows = append(rows, [2]string{"server", v.Server})
		}
		return fields(a.stdout, rows...)
	}
	return cmd
}
