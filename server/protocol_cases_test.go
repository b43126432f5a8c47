package server_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/fakeclock"
	"github.com/syncd-dev/syncd/ledger"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/syncproto"
)

// Cases PROTOCOL.md states that a client from another language meets, shown
// through a real syncd.

// A pull without a limit, or with limit 0, and every catch-up page of a
// subscription hold DefaultPullLimit entries (sections 5.5, 5.6 and 11).
func TestDefaultPageIs100Entries(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	const writes = syncproto.DefaultPullLimit + 50
	muts := make([]syncproto.Mutation, writes)
	for i := range muts {
		muts[i] = put(t, clock, "notes", fmt.Sprintf("k%03d", i), `1`)
	}
	requireApplied(t, c.push("p1", muts...))

	for _, frame := range []string{`{"type":"pull","id":"q1","cursor":0}`, `{"type":"pull","id":"q1","cursor":0,"limit":0}`} {
		c.write(websocket.MessageText, []byte(frame))
		page := expect[*syncproto.Changes](c)
		require.Len(t, page.Entries, syncproto.DefaultPullLimit, "%s", frame)
		require.True(t, page.More)
		require.Equal(t, page.Entries[len(page.Entries)-1].Seq, page.Cursor)
	}

	first := c.subscribe("s1", 0).(*syncproto.Changes)
	require.Len(t, first.Entries, syncproto.DefaultPullLimit)
	require.True(t, first.More, "a catch-up page")
	second := expectFeed(c)
	require.Len(t, second.Entries, writes-syncproto.DefaultPullLimit)
	require.False(t, second.More, "caught up")
}

// Clock correction (section 9.3) must not follow the fastest device: after
// one device wrote 55 s ahead (inside the skew bound), which the server's
// hybrid clock observes, another device's welcome still carries the
// server's own wall time in server_time_ms, so a device with a correct
// clock computes an offset of zero, while server_hlc runs ahead.
func TestOneFastDeviceDoesNotDragAnotherDevicesClock(t *testing.T) {
	now := time.UnixMilli(1_733_140_000_000)
	ts := startServer(t, server.Config{Now: fakeclock.New(now).Now})
	fast := syncproto.NewClock("phone", fakeclock.New(now.Add(55*time.Second)).Now)
	phone := dial(t, ts, ts.Member(t, "acme", "phone"))
	phone.hello("phone", 0, fast)
	ahead := put(t, fast, "notes", "n", `"from the fast phone"`)
	requireApplied(t, phone.push("p1", ahead))

	correct := fakeclock.New(now)
	laptop := dial(t, ts, ts.Member(t, "acme", "laptop"))
	w := laptop.hello("laptop", 0, syncproto.NewClock("laptop", correct.Now))
	require.GreaterOrEqual(t, w.ServerHLC.Wall, ahead.HLC.Wall, "server_hlc observed the fast write")
	require.Equal(t, now.UnixMilli(), w.ServerTime, "server_time_ms is the server's wall clock")
	require.Zero(t, w.ServerTime-correct.Now().UnixMilli(), "the laptop's offset (section 9.3)")
}

// base_version and seen_version are the two members whose absence differs
// from 0 (sections 2 and 5.3): "base_version":0 is create-only and absent
// is unconditional; "seen_version":0 says the device saw the key absent, so
// overwriting a version logs it as the loser, and absent says nothing.
func TestAbsentAndZeroVersionsDifferOnTheWire(t *testing.T) {
	ts := startServer(t, server.Config{})
	laptop, laptopClock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")
	requireApplied(t, laptop.push("l1", put(t, laptopClock, "notes", "n", `"laptop"`), put(t, laptopClock, "notes", "s", `"laptop"`)))
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	mutation := func(key, extra string) string {
		return `{"type":"push","id":"p1","mutations":[{"op_id":"` + newOpID(t) + `","model":"notes","key":"` + key +
			`","op":"put","value":"phone","hlc":"` + clock.Now().String() + `"` + extra + `}]}`
	}
	pushRaw := func(frame string) syncproto.Result {
		c.write(websocket.MessageText, []byte(frame))
		return c.pushResult("p1", 1)[0]
	}

	r := pushRaw(mutation("n", `,"base_version":0`))
	require.Equal(t, syncproto.StatusConflict, r.Status, "base_version 0 is create-only: %+v", r)
	require.Equal(t, uint64(1), r.Winner.Version)
	r = pushRaw(mutation("n", ``))
	require.Equal(t, syncproto.StatusApplied, r.Status, "absent base_version is unconditional: %+v", r)
	require.Equal(t, uint64(2), r.Version)

	conflicts := func() []adminapi.Conflict {
		var out []adminapi.Conflict
		require.Equal(t, http.StatusOK, ts.adminGet(t, "/v1/admin/conflicts?tenant=acme", ts.adminToken, &out))
		return out
	}
	before := len(conflicts())
	requireApplied(t, []syncproto.Result{pushRaw(mutation("s", ``))})
	require.Len(t, conflicts(), before, "absent seen_version: nothing logged")
	requireApplied(t, []syncproto.Result{pushRaw(mutation("s", `,"seen_version":0`))})
	logged := conflicts()
	require.Len(t, logged, before+1, "seen_version 0 over version 2: the overwritten state is logged")
	require.Equal(t, "s", logged[0].Key)
	require.Equal(t, uint64(2), logged[0].Loser.Version)
}

// An equal hlc does not win (section 8): a second write stamped exactly
// like the record's current one is superseded, with that record as winner.
func TestEqualHLCIsSuperseded(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	first := put(t, clock, "notes", "n", `"first"`)
	requireApplied(t, c.push("p1", first))
	same := put(t, clock, "notes", "n", `"same stamp"`)
	same.HLC = first.HLC
	r := c.push("p2", same)[0]
	require.Equal(t, syncproto.StatusSuperseded, r.Status, "%+v", r)
	require.Equal(t, first.HLC, r.Winner.HLC)
	require.Equal(t, uint64(1), r.Winner.Version)
	require.JSONEq(t, `"first"`, string(r.Winner.Value))
}

// What the origin allow-list matches (section 1): an Origin whose host and
// port are the request's Host, unlisted and whatever its scheme; else its
// host[:port] against shell-style patterns without case, "*" spanning
// dots; a pattern holding "://" against scheme and host.
func TestOriginAllowList(t *testing.T) {
	ts := startServer(t, server.Config{AllowedOrigins: []string{"*.example.com", "localhost:*", "https://app.example.org"}})
	token := ts.Member(t, "acme", "phone")
	host := ts.url[len("http://"):]
	hostname, portText, err := net.SplitHostPort(host)
	require.NoError(t, err)
	port, err := strconv.Atoi(portText)
	require.NoError(t, err)
	otherPort := strconv.Itoa(port + 1)
	for origin, allowed := range map[string]bool{
		"http://" + host:                       true,  // the request's own Host, not listed
		"https://" + host:                      true,  // the scheme does not count for it
		"http://" + hostname + ":" + otherPort: false, // the same host on another port
		"http://" + hostname:                   false, // nor without the port
		"https://a.example.com":                true,
		"https://a.b.example.com":              true, // "*" spans dots
		"https://A.EXAMPLE.COM":                true, // without case
		"https://example.com":                  false,
		"https://a.example.com:8443":           false, // the pattern has no port
		"http://localhost:3000":                true,
		"http://localhost":                     false, // "localhost:*" needs a port
		"https://app.example.org":              true,
		"http://app.example.org":               false, // a "://" pattern checks the scheme
		"null":                                 false, // an opaque origin
	} {
		opts := dialOptions(token)
		opts.HTTPHeader.Set("Origin", origin)
		if allowed {
			c := dialWith(t, ts, opts)
			c.conn.CloseNow()
			continue
		}
		e := refusedUpgrade(t, ts, opts, http.StatusForbidden)
		require.Equal(t, syncproto.CodeForbiddenOrigin, e.Code, "origin %s", origin)
	}
}

// A session that says no hello within the hello deadline gets
// hello_required without an id, then close 1002 (sections 4 and 12).
func TestNoHelloInTimeIsClosed(t *testing.T) {
	ts := startServer(t, server.Config{HelloTimeout: 200 * time.Millisecond})
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	e := c.expectRefusalClose(syncproto.CodeHelloRequired)
	require.Empty(t, e.ID, "an error about the connection carries no id")
}

// A message that starts to arrive and stalls past the frame read timeout
// is cut at the TCP level, without an error or close frame, and nothing of
// it is applied (section 2). The websocket library closes the connection
// when a read times out; a close frame could not follow the unfinished
// message anyway.
func TestStalledFrameIsCutWithoutACloseFrame(t *testing.T) {
	ts := startServer(t, server.Config{FrameReadTimeout: 200 * time.Millisecond})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	head := ts.head(t)
	w, err := c.conn.Writer(t.Context(), websocket.MessageText)
	require.NoError(t, err)
	frame, err := syncproto.Encode(&syncproto.Push{ID: "p1", Mutations: []syncproto.Mutation{put(t, clock, "notes", "k", `1`)}})
	require.NoError(t, err)
	// More than the writer buffers, so the frame is on the wire; the last
	// byte is never sent.
	_, err = w.Write(append(frame[:len(frame)-1], strings.Repeat(" ", 64<<10)...))
	require.NoError(t, err)
	_, err = c.next()
	require.Error(t, err, "the connection is cut")
	require.Equal(t, websocket.StatusCode(-1), websocket.CloseStatus(err), "no close frame: %v", err)
	require.Equal(t, head, ts.head(t), "nothing applied")
}

// Connections beyond the per-address cap are closed at accept, before any
// HTTP answer (section 1); one that ends makes room.
func TestConnectionsBeyondThePerAddressCapAreClosedAtAccept(t *testing.T) {
	ts := startServer(t, server.Config{MaxConnectionsPerAddress: 2})
	token := ts.Member(t, "acme", "phone")
	first := dial(t, ts, token)
	dial(t, ts, token)
	c, resp, err := tryDial(ts, dialOptions(token))
	if err == nil {
		c.conn.CloseNow()
	}
	require.Error(t, err, "a third connection from the address is refused")
	require.Nil(t, resp, "without an HTTP answer")
	first.conn.CloseNow()
	require.Eventually(t, func() bool {
		c, _, err := tryDial(ts, dialOptions(token))
		if err == nil {
			c.conn.CloseNow()
		}
		return err == nil
	}, ioTimeout, 20*time.Millisecond, "a closed connection makes room")
}

// quotaDefault is how section 11 states a mutation quota's default.
func quotaDefault(rate float64, burst int) string {
	if rate < 0 {
		return "off"
	}
	return fmt.Sprintf("%g/s, burst %d", rate, burst)
}

// PROTOCOL.md states the server's defaults that a client meets but
// welcome does not announce (section 11's table, and where sections 1, 2
// and 4 name them), and ledger_retention_ms's default, with the values the
// server uses.
func TestProtocolStatesServerDefaults(t *testing.T) {
	b, err := os.ReadFile("../PROTOCOL.md")
	require.NoError(t, err)
	doc := strings.Join(strings.Fields(string(b)), " ")
	mib := func(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
	dur := func(ds ...time.Duration) string {
		var out []string
		for _, d := range ds {
			switch {
			case d%(24*time.Hour) == 0:
				out = append(out, fmt.Sprintf("%d days", d/(24*time.Hour)))
			case d%time.Minute == 0:
				out = append(out, fmt.Sprintf("%d min", d/time.Minute))
			default:
				out = append(out, fmt.Sprintf("%d s", d/time.Second))
			}
		}
		return strings.Join(out, " / ")
	}
	unannounced := map[string]string{
		"requests one session sends (announced, table above)":      fmt.Sprintf("%d/s, burst %d", int(server.DefaultRequestsPerSecond), server.DefaultRequestBurst),
		"a session that sends nothing (announced, table above)":    dur(syncproto.DefaultIdleTimeout),
		"`hello` within, after the upgrade":                        dur(server.DefaultHelloTimeout),
		"open connections, whole server":                           fmt.Sprint(server.DefaultMaxConnections),
		"open connections per token / per tenant (all its tokens)": fmt.Sprintf("%d / half the server's", server.DefaultMaxConnectionsPerToken),
		"mutations per token / per tenant (section 14)": quotaDefault(server.DefaultTokenMutationsPerSecond, server.DefaultTokenMutationBurst) + " / " +
			quotaDefault(server.DefaultTenantMutationsPerSecond, server.DefaultTenantMutationBurst),
		"a tenant's share of the commits when the server is saturated (section 14)":               "equal weights",
		"frames decoded and admitted, and feed pages built, at once by all sessions (work turns)": "the processors (`GOMAXPROCS`)",
		"bytes of frames being read or applied, whole server / per token / per tenant (section 14)": mib(server.DefaultFrameBudgetBytes) + " / " +
			mib(server.DefaultTokenFrameBytes) + " / " + mib(server.DefaultTenantFrameBytes),
		"a frame, once started, arrives whole within":                                   dur(server.DefaultFrameReadTimeout),
		"a frame the server writes (or a keepalive ping) is taken by the client within": dur(server.DefaultWriteTimeout),
		"a session's token is checked for revocation every":                             dur(server.DefaultTokenRecheck),
		"TCP connections one IP address holds open, per listener":                       fmt.Sprint(server.DefaultMaxConnectionsPerAddress),
		"snapshots served at once / waiting for a turn / one tenant's running or waiting (section 7)": fmt.Sprintf("%d / %d / %d",
			server.DefaultMaxConcurrentSnapshots, server.DefaultMaxQueuedSnapshots, server.DefaultMaxSnapshotsPerTenant),
		"a snapshot's wait for its turn / its whole download / each write of its body": dur(server.DefaultSnapshotQueueTimeout,
			server.DefaultSnapshotTimeout, server.DefaultSnapshotWriteTimeout),
		"body kept for the slowest reader of a shared snapshot read": mib(server.DefaultSnapshotShareBytes),
		"HTTP request headers / whole request / response write (a snapshot extends it per write) / kept-alive idle connection": dur(server.ReadHeaderTimeout,
			server.ReadTimeout, server.WriteTimeout, server.IdleTimeout),
		"scope values one subscription follows (section 19; announced, table above)": fmt.Sprint(syncproto.DefaultMaxScopeValues),
		"oplog entries kept per tenant / their age (section 7)": fmt.Sprintf("%d / %s",
			replication.DefaultOplogEntriesPerTenant, dur(replication.DefaultLogRetention.MaxAge)),
		"ledger decisions kept per tenant / their age (section 10; announced as `ledger_retention_ms`)": fmt.Sprintf("%d / %s",
			ledger.DefaultMaxEntries, dur(ledger.DefaultMaxAge)),
	}
	_, table, ok := strings.Cut(string(b), "| limit | syncd flag | syncd default |")
	require.True(t, ok, "section 11's table of unannounced settings")
	table, _, _ = strings.Cut(table, "\n\n")
	rows := strings.Split(table, "\n")[2:] // past the header's end and its rule
	require.Len(t, rows, len(unannounced), "one row per setting checked here")
	for _, row := range rows {
		cells := strings.Split(row, " | ")
		require.Greater(t, len(cells), 3, "row %q", row)
		setting := strings.TrimPrefix(cells[0], "| ")
		want, ok := unannounced[setting]
		require.True(t, ok, "section 11 lists %q, which this test does not know", setting)
		require.Equal(t, want, cells[2], "syncd's default for %q", setting)
	}

	for _, want := range []string{
		fmt.Sprintf("within %d seconds of the upgrade", int(server.DefaultHelloTimeout.Seconds())),
		fmt.Sprintf("whole within %d seconds", int(server.DefaultFrameReadTimeout.Seconds())),
		fmt.Sprintf("`ledger_retention_ms` | %d ms", ledger.DefaultMaxAge.Milliseconds()),
		fmt.Sprintf("(%d by default)", server.DefaultMaxConnectionsPerAddress),
		fmt.Sprintf("write timeout (%d seconds in syncd)", int(server.DefaultWriteTimeout.Seconds())),
	} {
		require.Contains(t, doc, want)
	}
}

// A web page on an allowed origin may fetch the snapshot to resync
// (section 7): the preflight allows GET with Authorization, and the answer
// names the origin; a page on any other origin is refused at the
// preflight and its answers name no origin, so the browser hides them.
func TestSnapshotAnswersBrowsersOnAllowedOrigins(t *testing.T) {
	ts := startServer(t, server.Config{AllowedOrigins: []string{"app.example.com"}})
	token := ts.Member(t, "acme", "browser")
	request := func(method, origin, token string) *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), method, ts.url+syncproto.SnapshotPath, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		if method == http.MethodOptions {
			req.Header.Set("Access-Control-Request-Method", http.MethodGet)
			req.Header.Set("Access-Control-Request-Headers", "authorization")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	pre := request(http.MethodOptions, "https://app.example.com", "")
	require.Equal(t, http.StatusNoContent, pre.StatusCode)
	require.Equal(t, "https://app.example.com", pre.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, http.MethodGet, pre.Header.Get("Access-Control-Allow-Methods"))
	require.Equal(t, "Authorization", pre.Header.Get("Access-Control-Allow-Headers"))
	got := request(http.MethodGet, "https://app.example.com", token)
	require.Equal(t, http.StatusOK, got.StatusCode)
	require.Equal(t, "https://app.example.com", got.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, got.Header.Values("Vary"), "Origin")
	refused := request(http.MethodGet, "https://app.example.com", "")
	require.Equal(t, http.StatusUnauthorized, refused.StatusCode, "the token still decides")
	require.Equal(t, "https://app.example.com", refused.Header.Get("Access-Control-Allow-Origin"), "so the page can read why")

	pre = request(http.MethodOptions, "https://evil.example.org", "")
	require.Equal(t, http.StatusForbidden, pre.StatusCode)
	require.Equal(t, syncproto.CodeForbiddenOrigin, httpErrorBody(t, pre).Code)
	require.Empty(t, pre.Header.Get("Access-Control-Allow-Origin"))
	require.Empty(t, request(http.MethodGet, "https://evil.example.org", token).Header.Get("Access-Control-Allow-Origin"))
}

// The server's own checks of a mutation run in section 5.3's order (after
// the member checks): undeclared model, forbidden_model, hlc origin,
// clock_skew, missing_base_version, then the ledger, then the policy. Each
// case breaks two adjacent checks and must get the earlier one's code.
func TestServerMutationChecksFollowTheDocumentedOrder(t *testing.T) {
	b, err := os.ReadFile("../PROTOCOL.md")
	require.NoError(t, err)
	doc := strings.Join(strings.Fields(string(b)), " ")
	_, list, ok := strings.Cut(doc, "then the server's checks: ")
	require.True(t, ok, "section 5.3 states the server's checks")
	list, rest, ok := strings.Cut(list, "; then the ledger (`op_id_reused`, `expired`) and the policy.")
	require.True(t, ok, "then the ledger, then the policy")
	require.NotEmpty(t, rest)
	var documented []syncproto.Code
	for _, item := range strings.Split(list, ", ") {
		ticks := strings.Split(item, "`")
		require.GreaterOrEqual(t, len(ticks), 3, "item %q names its code", item)
		documented = append(documented, syncproto.Code(ticks[len(ticks)-2]))
	}
	documented = append(documented, syncproto.CodeOpIDReused, "conflict")
	require.Equal(t, []syncproto.Code{syncproto.CodeInvalidModel, syncproto.CodeForbiddenModel, syncproto.CodeInvalidHLC,
		syncproto.CodeClockSkew, syncproto.CodeMissingBaseVersion, syncproto.CodeNeedsUpgrade, syncproto.CodeOpIDReused, "conflict"}, documented,
		"the order the cases below prove")

	ts := startServer(t, server.Config{Policies: replication.Config{"notes": syncproto.PolicyLWW, "audit": syncproto.PolicyLWW,
		"accounts": syncproto.PolicyOptimistic, replication.AnyModel: syncproto.PolicyNone},
		ValueVersions: map[string]server.ModelVersions{"accounts": {Current: 1}}})
	token := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{auth.Wildcard}, Write: []string{"notes", "accounts"}})
	c, clock := session(t, ts, token, "phone")
	taken := put(t, clock, "notes", "taken", `"v1"`)
	requireApplied(t, c.push("setup", taken))
	ahead := time.Now().Add(time.Hour).UnixMilli()

	cases := []func() syncproto.Mutation{
		func() syncproto.Mutation { return put(t, clock, "undeclared", "k", `1`) }, // the token may not write it either
		func() syncproto.Mutation {
			m := put(t, clock, "audit", "k", `1`)
			m.HLC.Origin = "laptop"
			return m
		},
		func() syncproto.Mutation {
			m := put(t, clock, "notes", "k", `1`)
			m.HLC = syncproto.Timestamp{Wall: ahead, Origin: "laptop"}
			return m
		},
		func() syncproto.Mutation {
			m := put(t, clock, "accounts", "k", `1`)
			m.HLC = syncproto.Timestamp{Wall: ahead, Origin: "phone"}
			return m
		},
		func() syncproto.Mutation {
			m := put(t, clock, "accounts", "taken", `"v2"`)
			m.OpID, m.ValueVersion = taken.OpID, 2
			return m
		},
		func() syncproto.Mutation {
			m := putIf(t, clock, "accounts", "taken", `"v2"`, 1)
			m.OpID, m.ValueVersion = taken.OpID, 2
			return m
		},
		func() syncproto.Mutation {
			m := putIf(t, clock, "notes", "taken", `"v2"`, 7) // stale: a conflict under the policy
			m.OpID = taken.OpID
			return m
		},
	}
	require.Len(t, cases, len(documented)-1)
	for i, mutation := range cases {
		r := c.push(fmt.Sprintf("p%d", i), mutation())[0]
		require.Equal(t, syncproto.StatusRejected, r.Status, "%s before %s: %+v", documented[i], documented[i+1], r)
		require.Equal(t, documented[i], r.Code, "%s before %s: %+v", documented[i], documented[i+1], r)
	}
}

// A connection has one subscription: a new subscribe replaces the old one,
// and once the new one's first frame is sent no frame carries the old id
// (section 5.6). Unsubscribing with no subscription is answered pong.
func TestSubscribeReplacesTheSubscription(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	writer, wClock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")
	c.subscribe("s1", 0)
	requireApplied(t, writer.push("w1", put(t, wClock, "notes", "a", `1`)))
	c.waitLive(1)

	c.send(&syncproto.Subscribe{ID: "s2", Cursor: 0})
	requireApplied(t, writer.push("w2", put(t, wClock, "notes", "b", `2`)))
	var onS2 []syncproto.Change
	switched := false
	for range 100 {
		ch, ok := c.recv().(*syncproto.Changes)
		require.True(t, ok, "only changes frames are due")
		if ch.ID == "s1" {
			require.False(t, switched, "a frame of the old subscription after the new one's first")
			continue
		}
		require.Equal(t, "s2", ch.ID)
		switched = true
		onS2 = append(onS2, ch.Entries...)
		if len(onS2) == 2 {
			break
		}
	}
	require.Len(t, onS2, 2, "the new subscription delivers from its cursor")
	c.subID = "s2"
	requireApplied(t, writer.push("w3", put(t, wClock, "notes", "c", `3`)))
	require.Equal(t, "c", expectFeed(c).Entries[0].Key)

	c.send(&syncproto.Unsubscribe{ID: "u1"})
	require.Equal(t, "u1", expect[*syncproto.Pong](c).ID)
	c.subID = ""
	c.send(&syncproto.Unsubscribe{ID: "u2"})
	require.Equal(t, "u2", expect[*syncproto.Pong](c).ID, "no subscription: not an error")
	require.Empty(t, c.barrier())
}

// welcome.models lists the declared models the token may read or write,
// each with its policy and the token's permissions; a declared model the
// token may neither read nor write is not listed (section 5.2).
func TestWelcomeListsTheTokensModels(t *testing.T) {
	ts := startServer(t, server.Config{Policies: replication.Config{"notes": syncproto.PolicyLWW,
		"accounts": syncproto.PolicyOptimistic, "audit": syncproto.PolicyLWW, "secret": syncproto.PolicyLWW}})
	token := ts.Issue(t, auth.Principal{Tenant: "acme", ClientID: "phone", Read: []string{"notes", "accounts", "audit"}, Write: []string{"notes", "accounts"}})
	c := dial(t, ts, token)
	w := c.hello("phone", 0, syncproto.NewClock("phone", nil))
	require.Equal(t, map[string]syncproto.ModelAccess{
		"notes":    {Policy: syncproto.PolicyLWW, Read: true, Write: true},
		"accounts": {Policy: syncproto.PolicyOptimistic, Read: true, Write: true},
		"audit":    {Policy: syncproto.PolicyLWW, Read: true, Write: false},
	}, w.Models)
}

// An op id twice in one push is answered at its second occurrence as a
// resend: duplicate of the first answer, or op_id_reused when the content
// differs (section 6).
func TestOpIDTwiceInOnePush(t *testing.T) {
	ts := startServer(t, server.Config{})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	m := put(t, clock, "notes", "n", `"one"`)
	res := c.push("p1", m, m)
	require.Equal(t, syncproto.StatusApplied, res[0].Status)
	require.Equal(t, syncproto.StatusDuplicate, res[1].Status)
	require.Equal(t, syncproto.StatusApplied, res[1].OriginalStatus)
	require.Equal(t, res[0].Seq, res[1].Seq)

	other := put(t, clock, "notes", "m", `"two"`)
	changed := other
	changed.Value = []byte(`"changed"`)
	res = c.push("p2", other, changed)
	require.Equal(t, syncproto.StatusApplied, res[0].Status)
	require.Equal(t, syncproto.StatusRejected, res[1].Status)
	require.Equal(t, syncproto.CodeOpIDReused, res[1].Code)
}

// A deleted key keeps its tombstone version (sections 3.7 and 7): a
// create-only write to it (base_version 0) is a conflict whose winner is
// the tombstone, deleted, without a value; a write based on the
// tombstone's version applies and continues the versions. A key never
// written is version 0, deleted, with an empty hlc.
func TestTombstonesKeepTheirVersion(t *testing.T) {
	ts := startServer(t, server.Config{Policies: replication.Config{"accounts": syncproto.PolicyOptimistic}})
	c, clock := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	requireApplied(t, c.push("p1", putIf(t, clock, "accounts", "a", `1`, 0)))
	one := uint64(1)
	del := syncproto.Mutation{OpID: newOpID(t), Model: "accounts", Key: "a", Op: syncproto.OpDelete, HLC: clock.Now(), BaseVersion: &one}
	r := c.push("p2", del)[0]
	require.Equal(t, syncproto.StatusApplied, r.Status, "%+v", r)
	require.Equal(t, uint64(2), r.Version)

	r = c.push("p3", putIf(t, clock, "accounts", "a", `"again"`, 0))[0]
	require.Equal(t, syncproto.StatusConflict, r.Status, "%+v", r)
	require.Equal(t, uint64(2), r.Winner.Version)
	require.True(t, r.Winner.Deleted)
	require.Empty(t, r.Winner.Value)
	r = c.push("p4", putIf(t, clock, "accounts", "a", `"again"`, 2))[0]
	require.Equal(t, syncproto.StatusApplied, r.Status, "%+v", r)
	require.Equal(t, uint64(3), r.Version)

	r = c.push("p5", putIf(t, clock, "accounts", "never", `1`, 4))[0]
	require.Equal(t, syncproto.StatusConflict, r.Status, "%+v", r)
	require.Equal(t, syncproto.Winner{Version: 0, Deleted: true}, *r.Winner)
}

// The rate limits are checked before anything else of a request, hello
// included (sections 4 and 14): a hello over its token's quota is
// answered rate_limited with retry_after_ms and the session stays open,
// waiting for a hello, which succeeds once the quota has refilled.
func TestHelloOverTheQuotaIsRateLimited(t *testing.T) {
	now := fakeclock.New(time.UnixMilli(1_733_140_000_000))
	ts := startServer(t, server.Config{Now: now.Now, Quotas: server.Quotas{TokenMutationsPerSecond: 1, TokenMutationBurst: syncproto.MaxBatch}})
	token := ts.Member(t, "acme", "phone")
	busy := dial(t, ts, token)
	clock := syncproto.NewClock("phone", now.Now)
	busy.hello("phone", 0, clock)
	muts := make([]syncproto.Mutation, syncproto.MaxBatch-1) // with the hello, the whole burst
	for i := range muts {
		muts[i] = put(t, clock, "notes", fmt.Sprintf("k%d", i), `1`)
	}
	requireApplied(t, busy.push("p1", muts...))

	c := dial(t, ts, token)
	c.send(&syncproto.Hello{ID: "h1", ClientID: "phone", HLC: clock.Now()})
	e := c.recvError("h1", syncproto.CodeRateLimited)
	require.Equal(t, int64(1000), e.RetryAfterMS, "one request at 1/s")
	now.Set(now.Now().Add(time.Second))
	w := c.hello("phone", 0, clock)
	require.Equal(t, "h1", w.ID)
}
