// Package buildinfo says which build of syncd's code is running: the module
// version, the source revision and the Go toolchain, read from what the Go
// linker embeds (runtime/debug.ReadBuildInfo). syncd, syncctl and the client
// library report it (syncd --version, syncctl version, welcome, /metrics), so
// an operator or a device can tell which release answered.
package buildinfo

import (
	"runtime/debug"
	"strings"
	"sync"
)

// module is the path of syncd's module: the build of a program that embeds
// the client library is the version of this module it links, not the
// program's own.
const module = "github.com/syncd-dev/syncd"

// Info is one build.
type Info struct {
	// Version is the module's version: a release tag (v1.4.0), a
	// pseudo-version for a commit between releases, or "(devel)" for a
	// build whose revision the toolchain could not read.
	Version string
	// Revision is the source control revision ("" when unknown) and
	// Modified whether the working tree had uncommitted changes.
	Revision string
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// String is the build in one word, for logs and headers:
// version[+revision[-dirty]].
func (i Info) String() string {
	s := i.Version
	if i.Revision != "" && !containsRevision(i.Version, i.Revision) {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += "+" + rev
	}
	if i.Modified {
		s += "-dirty"
	}
	return s
}

// containsRevision reports whether a pseudo-version already names the
// revision (it ends with the revision's first 12 hex digits).
func containsRevision(version, rev string) bool {
	n := min(12, len(rev))
	return n > 0 && len(version) >= n && version[len(version)-n:] == rev[:n]
}

// linkedVersion and linkedRevision, when set at link time
// (-ldflags "-X github.com/syncd-dev/syncd/internal/buildinfo.linkedRevision=..."),
// win over what the toolchain embedded: the Makefile sets them from git, so
// a build made with -buildvcs=false (or outside a checkout) still names its
// revision.
var linkedVersion, linkedRevision string

// Read returns the running build. It reads the embedded build information
// once.
var Read = sync.OnceValue(func() Info {
	info := read()
	if linkedVersion != "" {
		info.Version = linkedVersion
	}
	if linkedRevision != "" {
		info.Revision, info.Modified = strings.CutSuffix(linkedRevision, "-dirty")
	}
	return info
})

func read() Info {
	info := Info{Version: "(devel)", GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	if bi.Main.Path == module && bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	for _, dep := range bi.Deps {
		if dep.Path == module && dep.Version != "" {
			info.Version = dep.Version
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if bi.Main.Path == module {
				info.Revision = s.Value
			}
		case "vcs.modified":
			if bi.Main.Path == module {
				info.Modified = s.Value == "true"
			}
		}
	}
	return info
}
