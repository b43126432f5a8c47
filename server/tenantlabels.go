package server

import "sync"

// otherTenants is the tenant label of the tenants beyond
// Config.MaxTenantLabels (a value no tenant name can take: syncproto.IDPattern).
const otherTenants = "~other"

// tenantLabels bounds the values of the tenant label of the per-tenant
// metrics (the committer's and the snapshot turns'): tenants given a
// weight, then the first maxLabels other tenants seen since start, have
// their own; the rest share otherTenants. One set serves every family, so
// a tenant has the same label in each. It is safe for concurrent use.
type tenantLabels struct {
	mu         sync.Mutex
	labels     map[string]bool // tenants with their own label
	maxLabels  int             // labels beyond the weighted tenants'
	unweighted int
}

func newTenantLabels(weights map[string]int, maxLabels int) *tenantLabels {
	l := &tenantLabels{labels: map[string]bool{}, maxLabels: maxLabels}
	for t := range weights {
		l.labels[t] = true
	}
	return l
}

// label is tenant's label value.
func (l *tenantLabels) label(tenant string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.labels[tenant] {
		return tenant
	}
	if l.unweighted < l.maxLabels {
		l.unweighted++
		l.labels[tenant] = true
		return tenant
	}
	return otherTenants
}
