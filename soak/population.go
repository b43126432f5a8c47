package soak

import (
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/soak/checker"
)

// The scenario's models and tenants.
const (
	// ModelNotes is last-writer-wins; every client puts and deletes in it.
	ModelNotes = "notes"
	// ModelDocs is optimistic; clients with full access PutIfVersion in it.
	ModelDocs = "docs"
	// ModelAudit may be read by every token and written by none: puts to
	// it are the poison writes the server always refuses.
	ModelAudit = "audit"
	// ModelTasks and ModelMembers are covered by scope ScopeProject (by
	// their project_id member); a live row of ModelMembers grants its
	// project to the user its user member names (partial sync).
	ModelTasks   = "tasks"
	ModelMembers = "members"
	// ScopeProject is the scope the scoped clients follow ("*": every
	// project they are granted), over Projects values.
	ScopeProject = "project"
	Projects     = 5

	tenantMain = "alpha"
	tenantSide = "beta"
	// sentinelClient is the harness's own client id (run.sentinel).
	sentinelClient = "harness"
)

// policies are the models syncd is started with.
var policies = map[string]string{ModelNotes: "lww", ModelDocs: "optimistic"}

// scopeArgs declare ScopeProject to syncd; scopes are the same for the
// checker.
var (
	scopeArgs = []string{"--scope", ScopeProject + "=" + ModelTasks + ".project_id," + ModelMembers + ".project_id", "--membership", ScopeProject + "=" + ModelMembers + ":user"}
	scopes    = []checker.Scope{{Name: ScopeProject, Models: []string{ModelTasks, ModelMembers}, Membership: ModelMembers}}
)

// project is the name of project i.
func project(i int) string { return fmt.Sprintf("p%d", i) }

// profile is one client of the population: who it is, what its token may
// do, which queue it keeps and how wrong its clock is.
type profile struct {
	ID     string
	Tenant string
	Read   []string
	Write  []string
	Queue  string // checker.QueueNDJSON, QueueSQLite or QueueMemory
	Skew   time.Duration
	// User is the user the token acts for (membership rows name it) and
	// Grants its token's scope grants; both only for scoped clients,
	// which read and write tasks and members and follow every project
	// they are granted.
	User   string
	Grants map[string][]string
}

// scoped reports whether the client takes part in partial sync.
func (p profile) scoped() bool { return p.User != "" }

// want is the client's scope request: every project granted, for a
// scoped client; none otherwise.
func (p profile) want() map[string][]string {
	if !p.scoped() {
		return nil
	}
	return map[string][]string{ScopeProject: {"*"}}
}

// writesDocs reports whether the client makes optimistic writes.
func (p profile) writesDocs() bool {
	for _, m := range p.Write {
		if m == ModelDocs {
			return true
		}
	}
	return false
}

// population derives the clients from their index, so that even a small
// run has the interesting kinds: c01 runs a clock beyond syncd's skew
// bound, c02 one ahead within it, c04 one behind; every fourth client
// (c03, c07, ...) may not read or write docs; every fifth (c04, c09, ...)
// is alone in another tenant; even clients keep an NDJSON queue, odd ones
// SQLite (BreakVolatileQueue gives c00 a memory queue). The clients of the
// main tenant that may write docs are scoped: each is its own user, reads
// and writes tasks and members, and holds projects through membership
// rows; c00's token also grants p0.
func population(cfg *Config) []profile {
	out := make([]profile, cfg.Clients)
	for i := range out {
		p := profile{
			ID:     fmt.Sprintf("c%02d", i),
			Tenant: tenantMain,
			Read:   []string{ModelNotes, ModelDocs, ModelAudit},
			Write:  []string{ModelNotes, ModelDocs},
			Queue:  checker.QueueNDJSON,
		}
		if i%2 == 1 {
			p.Queue = checker.QueueSQLite
		}
		if i == 0 && cfg.Break == BreakVolatileQueue {
			p.Queue = checker.QueueMemory
		}
		if i%4 == 3 {
			p.Read, p.Write = []string{ModelNotes, ModelAudit}, []string{ModelNotes}
		}
		if i%5 == 4 {
			p.Tenant = tenantSide
		}
		if p.Tenant == tenantMain && i%4 != 3 {
			p.User = p.ID
			p.Read = append(p.Read, ModelTasks, ModelMembers)
			p.Write = append(p.Write, ModelTasks, ModelMembers)
			if i == 0 {
				p.Grants = map[string][]string{ScopeProject: {project(0)}}
			}
		}
		switch i % 6 {
		case 1:
			p.Skew = cfg.MaxClockSkew * 5 / 2
		case 2:
			p.Skew = cfg.MaxClockSkew / 3
		case 4:
			p.Skew = -cfg.MaxClockSkew / 2
		}
		out[i] = p
	}
	return out
}
