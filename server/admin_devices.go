package server

import (
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// deviceKey names one device: its tenant and client id.
type deviceKey struct{ tenant, clientID string }

// deviceActivity is what the admin API says of a device beyond its
// sessions: its last push and the last error it was answered.
type deviceActivity struct {
	lastPush       time.Time
	lastPushOps    int
	lastError      syncproto.Code
	lastErrorAt    time.Time
	disconnectedAt time.Time // zero while a session of the device is open
}

// deviceBook keeps the activity of the devices with an open session on
// this node and of at most adminapi.MaxRecentDevices that disconnected
// (the earliest disconnected forgotten first). It is safe for concurrent
// use; each method holds its mutex for a map operation only.
type deviceBook struct {
	mu       sync.Mutex
	byDevice map[deviceKey]*deviceActivity
	recent   []deviceKey // disconnected, earliest first; each also in byDevice
	tracked  prometheus.Gauge
	// pushedByTenant counts the mutations each tenant pushed here since
	// start: one entry per tenant seen, as bounded as the token file (and
	// the JWT issuer's tenants), like the quota book.
	pushedByTenant map[string]uint64
}

// newDeviceBook makes the book and registers its gauge on reg.
func newDeviceBook(reg prometheus.Registerer) *deviceBook {
	b := &deviceBook{byDevice: map[deviceKey]*deviceActivity{}, pushedByTenant: map[string]uint64{}, tracked: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "syncd_admin_devices_tracked",
		Help: "Devices whose last push and last error the admin API keeps: those with a session open here plus at most 256 recently disconnected.",
	})}
	reg.MustRegister(b.tracked)
	return b
}

// entryLocked returns the device's activity, made when absent, and takes
// it off the recent list (it is connected again).
func (b *deviceBook) entryLocked(k deviceKey) *deviceActivity {
	a := b.byDevice[k]
	if a == nil {
		a = &deviceActivity{}
		b.byDevice[k] = a
		b.tracked.Set(float64(len(b.byDevice)))
	}
	if !a.disconnectedAt.IsZero() {
		a.disconnectedAt = time.Time{}
		b.recent = slices.DeleteFunc(b.recent, func(r deviceKey) bool { return r == k })
	}
	return a
}

// pushed records a push of ops mutations by p at now, and the first
// refusal among them, if any.
func (b *deviceBook) pushed(p auth.Principal, ops int, refusal syncproto.Code, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.entryLocked(deviceKey{p.Tenant, p.ClientID})
	a.lastPush, a.lastPushOps = now, ops
	b.pushedByTenant[p.Tenant] += uint64(ops)
	if refusal != "" {
		a.lastError, a.lastErrorAt = refusal, now
	}
}

// failed records an error answered to p's device at now.
func (b *deviceBook) failed(p auth.Principal, code syncproto.Code, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.entryLocked(deviceKey{p.Tenant, p.ClientID})
	a.lastError, a.lastErrorAt = code, now
}

// disconnected records that the last session of p's device here ended at
// now; the device joins the recent list, which forgets its earliest
// beyond adminapi.MaxRecentDevices.
func (b *deviceBook) disconnected(p auth.Principal, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := deviceKey{p.Tenant, p.ClientID}
	a := b.entryLocked(k)
	a.disconnectedAt = now
	b.recent = append(b.recent, k)
	for len(b.recent) > adminapi.MaxRecentDevices {
		delete(b.byDevice, b.recent[0])
		b.recent = b.recent[1:]
	}
	b.tracked.Set(float64(len(b.byDevice)))
}

// activity returns a copy of the device's activity (zero when unknown).
func (b *deviceBook) activity(tenant, clientID string) deviceActivity {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a := b.byDevice[deviceKey{tenant, clientID}]; a != nil {
		return *a
	}
	return deviceActivity{}
}

// pushedTotals returns a copy of the mutations each tenant pushed here.
func (b *deviceBook) pushedTotals() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.pushedByTenant)
}

// recentDevices returns the recently disconnected devices, latest first.
func (b *deviceBook) recentDevices() []adminapi.RecentDevice {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]adminapi.RecentDevice, 0, len(b.recent))
	for i := len(b.recent) - 1; i >= 0; i-- {
		k := b.recent[i]
		out = append(out, b.byDevice[k].device(k))
	}
	return out
}

func (a deviceActivity) device(k deviceKey) adminapi.RecentDevice {
	return adminapi.RecentDevice{Tenant: k.tenant, ClientID: k.clientID, LastPushAt: a.lastPush, LastPushOps: a.lastPushOps,
		LastError: string(a.lastError), LastErrorAt: a.lastErrorAt, DisconnectedAt: a.disconnectedAt}
}

// notePush records a push in the device book: its size and the first
// admission refusal among its writes (a refusal of the whole push is
// noted by notePushError).
func (s *Server) notePush(p auth.Principal, b *replication.Batch) {
	var code syncproto.Code
	for _, w := range b.Writes {
		if w.Refusal != nil {
			code = w.Refusal.Code
			break
		}
	}
	s.devices.pushed(p, len(b.Writes), code, s.now())
}

// notePushError records the code a refused push is answered with.
func (s *Server) notePushError(p auth.Principal, err error) {
	if err != nil {
		s.devices.failed(p, pushRefusalCode(err), s.now())
	}
}

// noteUntracked records a session's end: when it was its device's last
// session here, the device joins the recent list.
func (s *Server) noteUntracked(ss *session) {
	p := ss.principal()
	if p.ClientID == "" {
		return // it never said hello: no device to remember
	}
	for _, o := range s.sessionList() {
		if op := o.principal(); op.Tenant == p.Tenant && op.ClientID == p.ClientID {
			return
		}
	}
	s.devices.disconnected(p, s.now())
}

// adminRecentDevices answers the devices that disconnected from this node
// lately, latest first.
func (s *Server) adminRecentDevices(*http.Request) (any, int, error) {
	return s.devices.recentDevices(), 0, nil
}
