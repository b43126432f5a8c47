package server

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Defaults of Quotas' zero fields.
const (
	// The mutation quotas are off by default (negative): one device
	// replaying a backlog is bound by the commit rate, which any token or
	// tenant rate below it would throttle, and the committer's fair order
	// (Config.TenantWeights) already keeps a tenant pushing more than its
	// share from slowing the others. They remain for operators who sell
	// plans: the bursts apply when a rate is set.
	DefaultTokenMutationsPerSecond  = -1
	DefaultTokenMutationBurst       = 10_000
	DefaultTenantMutationsPerSecond = -1
	DefaultTenantMutationBurst      = 40_000
	DefaultMaxConnectionsPerToken   = 32
	// A token's frames may hold an eighth of DefaultFrameBudgetBytes, a
	// tenant's a quarter: one tenant never holds the whole budget.
	DefaultTokenFrameBytes  = 2 * syncproto.MaxFrameBytes
	DefaultTenantFrameBytes = 4 * syncproto.MaxFrameBytes
)

// Quotas bound what one token and one tenant take from the server, summed
// over all their sessions (the per-session request limit,
// Config.RequestsPerSecond, is separate). Mutation rates are counted in
// mutations: a push costs one per mutation it holds, and every other
// frame, decodable or not, costs one. A zero field takes its default; a
// negative one turns that quota off (the mutation rates' default). A
// burst must be at least syncproto.MaxBatch, so a full push can pass.
type Quotas struct {
	// TokenMutationsPerSecond and TokenMutationBurst meter one token (one
	// client id); over it a frame is answered rate_limited with
	// retry_after_ms and not processed.
	TokenMutationsPerSecond float64
	TokenMutationBurst      int
	// TenantMutationsPerSecond and TenantMutationBurst meter all the
	// tokens of one tenant together, the same way.
	TenantMutationsPerSecond float64
	TenantMutationBurst      int
	// MaxConnectionsPerToken caps one token's open websocket sessions; the
	// upgrade beyond it is refused HTTP 429 rate_limited with Retry-After.
	MaxConnectionsPerToken int
	// MaxConnectionsPerTenant caps the open websocket sessions of all the
	// tokens of one tenant together, refused the same way; zero means half
	// of Config.MaxConnections, so one tenant never holds every session.
	MaxConnectionsPerTenant int
	// TokenFrameBytes and TenantFrameBytes cap the bytes of frames one
	// token's sessions, and one tenant's, hold while they are read,
	// decoded or applied: their share of Config.FrameBudgetBytes. Beyond
	// it their next frame waits unread, as for the server's budget, while
	// other tokens' and tenants' frames go on. Never below one largest
	// frame.
	TokenFrameBytes  int64
	TenantFrameBytes int64
}

// setDefaults fills the zero fields; maxConnections is the server's cap
// on sessions (Config.MaxConnections), which the tenant's cap halves.
func (q *Quotas) setDefaults(maxConnections int) error {
	defRate := func(r *float64, b *int, dr float64, db int) error {
		if *r == 0 {
			*r = dr
		}
		if *b == 0 {
			*b = db
		}
		if *r > 0 && *b < syncproto.MaxBatch {
			return fmt.Errorf("a mutation burst of %d is below max_batch %d: full pushes could never pass", *b, syncproto.MaxBatch)
		}
		return nil
	}
	if q.MaxConnectionsPerToken == 0 {
		q.MaxConnectionsPerToken = DefaultMaxConnectionsPerToken
	}
	if q.MaxConnectionsPerTenant == 0 {
		q.MaxConnectionsPerTenant = max(1, maxConnections/2)
	}
	if q.TokenFrameBytes == 0 {
		q.TokenFrameBytes = DefaultTokenFrameBytes
	}
	if q.TenantFrameBytes == 0 {
		q.TenantFrameBytes = DefaultTenantFrameBytes
	}
	return errors.Join(
		defRate(&q.TokenMutationsPerSecond, &q.TokenMutationBurst, DefaultTokenMutationsPerSecond, DefaultTokenMutationBurst),
		defRate(&q.TenantMutationsPerSecond, &q.TenantMutationBurst, DefaultTenantMutationsPerSecond, DefaultTenantMutationBurst))
}

// Values of the quota label of syncd_quota_refusals_total.
const (
	quotaTokenMutations  = "token_mutations"
	quotaTenantMutations = "tenant_mutations"
	quotaTokenConns      = "token_connections"
	quotaTenantConns     = "tenant_connections"
	// Values of the quota label of syncd_quota_waits_total.
	quotaTokenFrames  = "token_frame_bytes"
	quotaTenantFrames = "tenant_frame_bytes"
)

// quotaBook holds the quotas' state: per token and per tenant, a mutation
// bucket, a frame budget and the open sessions. It keeps one entry per token and
// tenant seen since start; tokens are issued by the operator, so the maps
// are as bounded as the token file.
type quotaBook struct {
	q       Quotas
	now     func() time.Time
	refused *prometheus.CounterVec // quota
	waits   *prometheus.CounterVec // quota

	mu      sync.Mutex
	tokens  map[string]*tokenQuota
	tenants map[string]*tenantQuota
}

type tokenQuota struct {
	mutations *rate.Limiter
	frames    *frameBudget // nil: no cap
	conns     int
}

type tenantQuota struct {
	mutations *rate.Limiter
	frames    *frameBudget // nil: no cap
	conns     int
	refusals  uint64 // pushes and upgrades of the tenant refused by a quota (its tokens' or its own)
}

func newQuotaBook(q Quotas, now func() time.Time, m *metrics) *quotaBook {
	return &quotaBook{q: q, now: now, refused: m.quotaRefusals, waits: m.quotaWaits, tokens: map[string]*tokenQuota{}, tenants: map[string]*tenantQuota{}}
}

// limiter is a token bucket of rate r and burst b; r < 0 never refuses.
func limiter(r float64, b int) *rate.Limiter {
	if r < 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(r), b)
}

// frames is a frame budget of size bytes whose waits count as quota; nil
// when size < 0 (no cap).
func (b *quotaBook) frames(size int64, quota string) *frameBudget {
	if size < 0 {
		return nil
	}
	return newFrameBudget(size, nil, b.waits.WithLabelValues(quota))
}

func (b *quotaBook) token(id string) *tokenQuota {
	t := b.tokens[id]
	if t == nil {
		t = &tokenQuota{
			mutations: limiter(b.q.TokenMutationsPerSecond, b.q.TokenMutationBurst),
			frames:    b.frames(b.q.TokenFrameBytes, quotaTokenFrames),
		}
		b.tokens[id] = t
	}
	return t
}

func (b *quotaBook) tenant(name string) *tenantQuota {
	t := b.tenants[name]
	if t == nil {
		t = &tenantQuota{
			mutations: limiter(b.q.TenantMutationsPerSecond, b.q.TenantMutationBurst),
			frames:    b.frames(b.q.TenantFrameBytes, quotaTenantFrames),
		}
		b.tenants[name] = t
	}
	return t
}

// frameShare is the budgets p's frames draw on: its token's, its
// tenant's, then global.
func (b *quotaBook) frameShare(p auth.Principal, global *frameBudget) frameShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	return frameShare{b.token(p.TokenID).frames, b.tenant(p.Tenant).frames, global}
}

// charge takes n mutations from p's token and tenant buckets, or from
// neither: over either quota it returns the rate_limited error to answer,
// with how long to wait.
func (b *quotaBook) charge(p auth.Principal, n int) *syncproto.Error {
	now := b.now()
	b.mu.Lock()
	tok, ten := b.token(p.TokenID).mutations, b.tenant(p.Tenant).mutations
	b.mu.Unlock()
	n = min(n, b.q.TokenMutationBurst, b.q.TenantMutationBurst)
	rt := tok.ReserveN(now, max(n, 0))
	if d := rt.DelayFrom(now); d > 0 {
		rt.CancelAt(now)
		b.countRefusal(p.Tenant)
		return b.refuse(quotaTokenMutations, d, "this token is over %g mutations a second", b.q.TokenMutationsPerSecond)
	}
	rn := ten.ReserveN(now, max(n, 0))
	if d := rn.DelayFrom(now); d > 0 {
		rn.CancelAt(now)
		rt.CancelAt(now)
		b.countRefusal(p.Tenant)
		return b.refuse(quotaTenantMutations, d, "this tenant is over %g mutations a second", b.q.TenantMutationsPerSecond)
	}
	return nil
}

func (b *quotaBook) refuse(quota string, wait time.Duration, format string, args ...any) *syncproto.Error {
	b.refused.WithLabelValues(quota).Inc()
	e := syncproto.Errorf(syncproto.CodeRateLimited, format, args...)
	e.RetryAfterMS = max(1, wait.Milliseconds())
	return e
}

// openConn counts a session of p's token and tenant, or refuses it over
// MaxConnectionsPerToken or MaxConnectionsPerTenant: it then returns the
// rate_limited error to answer with HTTP 429.
func (b *quotaBook) openConn(p auth.Principal) *syncproto.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	tok, ten := b.token(p.TokenID), b.tenant(p.Tenant)
	var e *syncproto.Error
	switch {
	case b.q.MaxConnectionsPerToken > 0 && tok.conns >= b.q.MaxConnectionsPerToken:
		b.refused.WithLabelValues(quotaTokenConns).Inc()
		e = syncproto.Errorf(syncproto.CodeRateLimited, "this token already holds %d connections", b.q.MaxConnectionsPerToken)
	case b.q.MaxConnectionsPerTenant > 0 && ten.conns >= b.q.MaxConnectionsPerTenant:
		b.refused.WithLabelValues(quotaTenantConns).Inc()
		e = syncproto.Errorf(syncproto.CodeRateLimited, "this tenant already holds %d connections", b.q.MaxConnectionsPerTenant)
	default:
		tok.conns++
		ten.conns++
		return nil
	}
	ten.refusals++
	return e
}

// countRefusal counts a quota refusal of tenant's (quotaRefusals).
func (b *quotaBook) countRefusal(tenant string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tenant(tenant).refusals++
}

// quotaRefusals returns the quota refusals of each tenant seen since start
// (syncd_quota_refusals_total by tenant, which the metric does not label
// to keep its series bounded).
func (b *quotaBook) quotaRefusals() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]uint64, len(b.tenants))
	for name, t := range b.tenants {
		if t.refusals > 0 {
			out[name] = t.refusals
		}
	}
	return out
}

func (b *quotaBook) closeConn(p auth.Principal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token(p.TokenID).conns--
	b.tenant(p.Tenant).conns--
}

// refuseConns answers an upgrade that openConn refused with e.
func refuseConns(w http.ResponseWriter, e *syncproto.Error) {
	httpError(w, http.StatusTooManyRequests, retryIn(w, connsRetryAfterSeconds, e))
}

// connsRetryAfterSeconds is the Retry-After of a refusal by
// MaxConnectionsPerToken or MaxConnectionsPerTenant: a slot frees when one
// of the token's or tenant's sessions ends, which a client cannot know.
const connsRetryAfterSeconds = 5
