package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Defaults of Quotas' zero fields.
const (
	DefaultTokenMutationsPerSecond  = 5_000
	DefaultTokenMutationBurst       = 10_000
	DefaultTenantMutationsPerSecond = 20_000
	DefaultTenantMutationBurst      = 40_000
	DefaultMaxConnectionsPerToken   = 32
)

// Quotas bound what one token and one tenant take from the server, summed
// over all their sessions (the per-session request limit,
// Config.RequestsPerSecond, is separate). Mutation rates are counted in
// mutations: a push costs one per mutation it holds, and every other
// frame, decodable or not, costs one. A zero field takes its default; a
// negative one turns that quota off. A burst must be at least
// syncproto.MaxBatch, so a full push can pass.
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
}

func (q *Quotas) setDefaults() error {
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
	return errors.Join(
		defRate(&q.TokenMutationsPerSecond, &q.TokenMutationBurst, DefaultTokenMutationsPerSecond, DefaultTokenMutationBurst),
		defRate(&q.TenantMutationsPerSecond, &q.TenantMutationBurst, DefaultTenantMutationsPerSecond, DefaultTenantMutationBurst))
}

// Values of the quota label of syncd_quota_refusals_total.
const (
	quotaTokenMutations  = "token_mutations"
	quotaTenantMutations = "tenant_mutations"
	quotaTokenConns      = "token_connections"
)

// quotaBook holds the quotas' state: one mutation bucket per token and per
// tenant, and each token's open sessions. It keeps one entry per token and
// tenant seen since start; tokens are issued by the operator, so the maps
// are as bounded as the token file.
type quotaBook struct {
	q       Quotas
	now     func() time.Time
	refused *prometheus.CounterVec // quota

	mu      sync.Mutex
	tokens  map[string]*tokenQuota
	tenants map[string]*rate.Limiter
}

type tokenQuota struct {
	mutations *rate.Limiter
	conns     int
}

func newQuotaBook(q Quotas, now func() time.Time, m *metrics) *quotaBook {
	return &quotaBook{q: q, now: now, refused: m.quotaRefusals, tokens: map[string]*tokenQuota{}, tenants: map[string]*rate.Limiter{}}
}

// limiter is a token bucket of rate r and burst b; r < 0 never refuses.
func limiter(r float64, b int) *rate.Limiter {
	if r < 0 {
		return rate.NewLimiter(rate.Inf, 0)
	}
	return rate.NewLimiter(rate.Limit(r), b)
}

func (b *quotaBook) token(id string) *tokenQuota {
	t := b.tokens[id]
	if t == nil {
		t = &tokenQuota{mutations: limiter(b.q.TokenMutationsPerSecond, b.q.TokenMutationBurst)}
		b.tokens[id] = t
	}
	return t
}

func (b *quotaBook) tenant(name string) *rate.Limiter {
	l := b.tenants[name]
	if l == nil {
		l = limiter(b.q.TenantMutationsPerSecond, b.q.TenantMutationBurst)
		b.tenants[name] = l
	}
	return l
}

// charge takes n mutations from p's token and tenant buckets, or from
// neither: over either quota it returns the rate_limited error to answer,
// with how long to wait.
func (b *quotaBook) charge(p auth.Principal, n int) *syncproto.Error {
	now := b.now()
	b.mu.Lock()
	tok, ten := b.token(p.TokenID).mutations, b.tenant(p.Tenant)
	b.mu.Unlock()
	n = min(n, b.q.TokenMutationBurst, b.q.TenantMutationBurst)
	rt := tok.ReserveN(now, max(n, 0))
	if d := rt.DelayFrom(now); d > 0 {
		rt.CancelAt(now)
		return b.refuse(quotaTokenMutations, d, "this token is over %g mutations a second", b.q.TokenMutationsPerSecond)
	}
	rn := ten.ReserveN(now, max(n, 0))
	if d := rn.DelayFrom(now); d > 0 {
		rn.CancelAt(now)
		rt.CancelAt(now)
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

// openConn counts a session of the token, or refuses it over
// MaxConnectionsPerToken.
func (b *quotaBook) openConn(tokenID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.token(tokenID)
	if b.q.MaxConnectionsPerToken > 0 && t.conns >= b.q.MaxConnectionsPerToken {
		b.refused.WithLabelValues(quotaTokenConns).Inc()
		return false
	}
	t.conns++
	return true
}

func (b *quotaBook) closeConn(tokenID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.token(tokenID).conns--
}

// refuseTokenConns answers the upgrade refused by MaxConnectionsPerToken.
func (b *quotaBook) refuseTokenConns(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(tokenConnsRetryAfterSeconds))
	e := syncproto.Errorf(syncproto.CodeRateLimited, "this token already holds %d connections", b.q.MaxConnectionsPerToken)
	e.RetryAfterMS = tokenConnsRetryAfterSeconds * 1000
	httpError(w, http.StatusTooManyRequests, e)
}

// tokenConnsRetryAfterSeconds is the Retry-After of a refusal by
// MaxConnectionsPerToken: a slot frees when one of the token's sessions
// ends, which a client cannot know.
const tokenConnsRetryAfterSeconds = 5
