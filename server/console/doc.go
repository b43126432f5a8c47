// Package console is syncd's operator console: HTML pages served by the
// admin listener under /console/, built on the admin API's own answers
// (package adminapi). Every page asks the admin API in-process with the
// operator's admin token, so the console has no second query path and no
// privilege of its own: what the API refuses, the console cannot show.
//
// Pages: overview (build, uptime, readiness, connections, oplog range and
// ledger size, applies per second and push ack latency over the last
// minutes, refreshed live, alerts the server knows), cluster (nodes,
// applied seq, lag, lease holder and fencing token, last digest and
// records checks, the command stream's leader and followers, the NATS
// servers), tenants (sessions, lag, mutation rate over the sampler's
// window, quota refusals, oplog entries and floor, snapshots, mutations
// served), devices (connected sessions with cursor, lag, last push and
// last error; disconnect a device; the devices disconnected lately), data
// (the oplog paged and filtered by tenant and model, one key's history,
// conflicts, op-id lookup), tokens (the token file paged; issue a token,
// shown once on the answer page only; revoke one after a confirmation
// page, which ends its sessions).
//
// What it promises:
//
//   - Authentication: a page needs an admin token, either in the
//     Authorization header (Bearer) of each request or given once in the
//     login form, which opens a console session: a random id in a cookie
//     that is HttpOnly, SameSite=Strict, Path=/console/ and Secure when the
//     listener serves TLS. A session ends after IdleTimeout without a
//     request, after MaxSessionAge in any case, at logout, or as soon as
//     the admin API refuses its token (revoked). At most MaxSessions are
//     held; a login beyond that ends the oldest.
//   - CSRF: every state-changing request (POST) must be same-origin (the
//     Origin and Sec-Fetch-Site headers, when the browser sends them) and,
//     when it rides on a session cookie, carry the session's CSRF token
//     (form field csrf or header X-CSRF-Token). A cookie alone never
//     changes anything. A request with the bearer header needs no CSRF
//     token: a browser never adds that header across sites.
//   - Content: every value, key and name is rendered by html/template
//     (escaped); record values are shown only when asked for (values=1).
//     Every answer carries a strict Content-Security-Policy (scripts and
//     styles from /console/static/ only, no inline script, no framing),
//     nosniff, no referrer to other sites and no caching.
//   - Bounds: every table pages on the server (devices, tenants and tokens
//     PageSize rows a page; an oplog page is at most
//     MaxOplogPage entries; a key's history shows at most PageSize entries
//     and scans at most KeyScanEntries oplog entries per request, and says
//     where to continue); live figures
//     keep History of samples taken every SampleInterval by one sampler
//     goroutine that Close stops.
package console
