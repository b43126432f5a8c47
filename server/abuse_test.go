package server_test

// The abuse suite: each test reproduces a finding of the attack review
// (issue "One tenant, one token or one slow peer must never hurt the
// others") against a real syncd and asserts the defence. Counts are small
// enough for `make test`; `make abuse` runs the suite with the heavier
// counts of SYNCD_ABUSE_SCALE.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// abuseScale multiplies the attacks' counts: 1 in `make test`,
// SYNCD_ABUSE_SCALE in `make abuse`.
func abuseScale(t *testing.T) int {
	v := os.Getenv("SYNCD_ABUSE_SCALE")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "SYNCD_ABUSE_SCALE")
	require.Positive(t, n)
	return n
}

// answersWhile requires fn to finish while an attack still holds what it
// took: held, called after fn returns, reports that it still does (the
// attacks below only ever let go, so held after fn means held throughout;
// nil when the test holds it itself to its end). A server that made fn
// wait for the attack to end would not answer before held turns false,
// however slow or fast the machine; the guard (ioTimeout) only ends a wait
// on a frozen server. It logs how long fn took.
func answersWhile(t *testing.T, what string, held func() bool, fn func()) {
	t.Helper()
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		t.Logf("%s answered in %s", what, time.Since(start).Round(time.Millisecond))
	case <-time.After(ioTimeout):
		t.Fatalf("%s did not answer within %s: frozen", what, ioTimeout)
	}
	if held != nil {
		require.True(t, held(), "%s answered only once the attack had let go", what)
	}
}

// Finding 1: one tenant flooding the ledger and the conflict log, with
// far-future stamps, expires none of another tenant's offline writes and
// prunes none of its conflict history.
func TestAbuseOneTenantCannotExpireOrPruneAnother(t *testing.T) {
	const perTenant = 20
	ts := startServer(t, server.Config{
		Retention: server.Retention{
			LedgerMaxEntries: perTenant,
			Conflicts:        replication.Retention{MaxEntries: perTenant},
		},
		RetentionInterval: -1,
	})
	victim, vClock := session(t, ts, ts.Member(t, "victim", "phone"), "phone")
	// The victim's offline write, made now, delivered after the flood.
	offline := put(t, vClock, "notes", "offline", `"written on a plane"`)
	// Victim conflicts: writes that lose LWW to a newer one.
	requireApplied(t, victim.push("v0", put(t, vClock, "notes", "contested", `"newest"`)))
	older := syncproto.NewClock("phone", func() time.Time { return time.Now().Add(-time.Hour) })
	for i := range 3 {
		res := victim.push(fmt.Sprintf("v%d", i+1), put(t, older, "notes", "contested", `"older"`))
		require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	}

	attacker, aClock := session(t, ts, ts.Member(t, "attacker", "bot"), "bot")
	ahead := syncproto.NewClock("bot", func() time.Time { return time.Now().Add(59 * time.Second) })
	n := 10 * perTenant * abuseScale(t)
	for i := 0; i < n; i += 50 {
		muts := make([]syncproto.Mutation, 0, 50)
		for j := range 50 {
			muts = append(muts, put(t, ahead, "notes", fmt.Sprintf("k%d", (i+j)%7), `1`))
		}
		attacker.push(fmt.Sprintf("a%d", i), muts...)
	}
	// And more conflicts than the per-tenant bound: writes older than what
	// the flood left, each superseded.
	requireApplied(t, attacker.push("a-base", put(t, aClock, "notes", "k-contested", `1`)))
	stale := syncproto.NewClock("bot", func() time.Time { return time.Now().Add(-time.Hour) })
	for i := range 3 * perTenant * abuseScale(t) {
		res := attacker.push(fmt.Sprintf("c%d", i), put(t, stale, "notes", "k-contested", `0`))
		require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	}
	ts.runRetention(t)
	var theirs []adminapi.Conflict
	ts.Admin(t, "/v1/admin/conflicts?tenant=attacker&limit=1000", &theirs)
	require.Len(t, theirs, perTenant, "the attacker's own conflict log was pruned to its bound")

	res := victim.push("late", offline)
	require.Equal(t, syncproto.StatusApplied, res[0].Status, "the other tenant's flood expired this write: %+v", res[0])
	var conflicts []adminapi.Conflict
	ts.Admin(t, "/v1/admin/conflicts?tenant=victim", &conflicts)
	require.Len(t, conflicts, 3, "the victim's conflict history survived")
}

// Finding 1, the oplog: one tenant writing far past its oplog bound, with
// compactions between its writes, sends no device of another tenant to
// resync, however old its cursor: the bound and the compaction floor are
// per tenant. The writer's own stale device is sent to resync.
func TestAbuseOneTenantsChurnResyncsNoOther(t *testing.T) {
	// The victim writes once a round: its bound holds its own writes at
	// every scale, so only another tenant's churn could expire its
	// cursor; the attacker writes twice its bound every round.
	rounds := 5 * abuseScale(t)
	perTenant := 20 + rounds
	ts := startServer(t, server.Config{
		Retention:         server.Retention{Oplog: replication.Retention{MaxEntries: int64(perTenant), MaxAge: -1}},
		RetentionInterval: -1,
	})
	victimToken := ts.Member(t, "victim", "phone")
	victim, vClock := session(t, ts, victimToken, "phone")
	requireApplied(t, victim.push("v0", put(t, vClock, "notes", "v0", `0`)))
	requireApplied(t, victim.push("v1", put(t, vClock, "notes", "v1", `1`)))
	// The victim's tablet synced up to here, then went offline.
	tabletCursor := victim.pull("tablet", 0).Cursor

	attackerToken := ts.Member(t, "attacker", "bot")
	attacker, aClock := session(t, ts, attackerToken, "bot")
	requireApplied(t, attacker.push("a-first", put(t, aClock, "notes", "first", `0`)))
	staleBotCursor := attacker.pull("bot-early", 0).Cursor
	var later []string // the victim's writes the tablet has not seen
	for r := range rounds {
		for i := 0; i < 2*perTenant; i += 20 {
			muts := make([]syncproto.Mutation, 0, 20)
			for j := range 20 {
				muts = append(muts, put(t, aClock, "notes", fmt.Sprintf("k%d-%d", r, i+j), `1`))
			}
			requireApplied(t, attacker.push(fmt.Sprintf("a%d-%d", r, i), muts...))
		}
		m := put(t, vClock, "notes", fmt.Sprintf("later%d", r), `2`)
		requireApplied(t, victim.push(fmt.Sprintf("later%d", r), m))
		later = append(later, m.OpID)
		ts.runRetention(t)
	}
	// A barrier: on a cluster node, the compactions above are applied
	// before this write is answered.
	requireApplied(t, attacker.push("a-barrier", put(t, aClock, "notes", "barrier", `1`)))

	// The attacker's own stale device resyncs: its tenant's floor passed
	// its cursor, and so the tablet's, which is older.
	require.Greater(t, staleBotCursor, tabletCursor)
	bot, _ := session(t, ts, attackerToken, "bot")
	bot.send(&syncproto.Pull{ID: "stale", Cursor: staleBotCursor})
	rs := expect[*syncproto.Resync](bot)
	require.Equal(t, syncproto.ResyncCursorExpired, rs.Reason)

	// The victim's tablet resumes from its old cursor, by pull and by
	// subscribe, and receives every write it missed.
	tablet := dial(t, ts, victimToken)
	tablet.hello("phone", tabletCursor, syncproto.NewClock("phone", nil))
	page := tablet.pull("resume", tabletCursor)
	var got []string
	for _, e := range page.Entries {
		got = append(got, e.OpID)
	}
	require.Equal(t, later, got, "the tablet gets exactly the writes it missed")
	require.False(t, page.More)
	sub, ok := tablet.subscribe("follow", tabletCursor).(*syncproto.Changes)
	require.True(t, ok, "subscribing from the old cursor is not sent to resync")
	require.Len(t, sub.Entries, len(later))
}

// Finding 3: stalled snapshot downloads (clients that stop reading) hold
// neither the connections nor the attention other requests need, and are
// cut after the per-write deadline.
func TestAbuseStalledSnapshotsFreezeNobody(t *testing.T) {
	// The stalled readers' write deadline outlasts the test: only their
	// closing lets go of their turns (TestSnapshotSharedWithAStalledReader
	// shows the deadline cutting one).
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 2, MaxQueuedSnapshots: -1, SnapshotWriteTimeout: time.Hour})
	writer, clock := session(t, ts, ts.Member(t, "acme", "seeder"), "seeder")
	big := `"` + strings.Repeat("x", 8<<10) + `"`
	for i := range 20 * abuseScale(t) { // ~8 MiB: more than socket buffers hold
		muts := make([]syncproto.Mutation, 50)
		for j := range muts {
			muts[j] = put(t, clock, "notes", fmt.Sprintf("k%d-%d", i, j), big)
		}
		requireApplied(t, writer.push(fmt.Sprintf("s%d", i), muts...))
	}

	// Eight devices start a snapshot and stop reading after the headers.
	statuses := map[int]int{}
	var stalled []*http.Response
	for i := range 8 {
		resp := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", fmt.Sprintf("device-%d", i)))
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusOK {
			stalled = append(stalled, resp)
		} else {
			require.Equal(t, syncproto.CodeServerBusy, httpErrorBody(t, resp).Code)
			require.NotEmpty(t, resp.Header.Get("Retry-After"))
			resp.Body.Close()
		}
	}
	require.Equal(t, map[int]int{http.StatusOK: 2, http.StatusServiceUnavailable: 6}, statuses, "the concurrency limit admits two")

	stillStalled := func() bool {
		return ts.Metric(t, "syncd_snapshots_cut_total") == "0" && ts.Metric(t, "syncd_snapshots_active") == "2"
	}
	answersWhile(t, "/readyz", stillStalled, func() {
		require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, ts.url+"/readyz", "", nil))
	})
	answersWhile(t, "a new tenant's hello and push", stillStalled, func() {
		c, clock := session(t, ts, ts.Member(t, "newcomer", "phone"), "phone")
		requireApplied(t, c.push("p1", put(t, clock, "notes", "hello", `1`)))
	})
	answersWhile(t, "the admin API", stillStalled, func() { ts.Status(t) })

	// The stalled readers go away and their turns come back: a reader
	// that reads gets the whole snapshot.
	for _, resp := range stalled {
		resp.Body.Close()
	}
	_, recs := ts.Snapshot(t, ts.Member(t, "acme", "patient"))
	require.Equal(t, 20*abuseScale(t)*50, len(recs), "a reader that reads gets the whole snapshot")
}

// Finding 3, per tenant: one tenant's devices hold at most
// MaxSnapshotsPerTenant snapshots running or waiting (all its tokens
// together), so a storm of one tenant leaves turns to the others.
func TestAbuseOneTenantCannotTakeEverySnapshotTurn(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 3, MaxQueuedSnapshots: -1, MaxSnapshotsPerTenant: 2, SnapshotWriteTimeout: time.Hour})
	seedLarge(t, ts)
	var stalled []*http.Response
	for i := range 2 {
		resp := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", fmt.Sprintf("device-%d", i)))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		stalled = append(stalled, resp) // stops reading after the headers
	}
	over := syncdtest.Get(t, ts.url+syncproto.SnapshotPath, ts.Member(t, "acme", "device-2"))
	body := httpErrorBody(t, over)
	require.Equal(t, http.StatusServiceUnavailable, over.StatusCode, "a third of acme's snapshots is over its tenant's cap")
	require.Equal(t, syncproto.CodeServerBusy, body.Code)
	require.Contains(t, body.Message, "this tenant already has 2 snapshots")
	require.NotEmpty(t, over.Header.Get("Retry-After"))
	require.Positive(t, body.RetryAfterMS)
	over.Body.Close()

	answersWhile(t, "another tenant's snapshot", func() bool { return ts.Metric(t, "syncd_snapshots_cut_total") == "0" }, func() {
		_, recs := ts.Snapshot(t, ts.Member(t, "globex", "phone"))
		require.Empty(t, recs, "globex has written nothing")
	})
	for _, resp := range stalled {
		resp.Body.Close()
	}
}

// Finding 4: a value nested far deeper than MaxValueDepth, though it fits
// the frame, is refused alone (bad_request); the rest of its batch is
// applied, and another device's later write to the same key gets an
// answer it can decode instead of the poisoned winner.
func TestAbusePoisonedValueIsRefused(t *testing.T) {
	const depth = 1000 // within the frame's nesting limit, far beyond the value's
	ts := startServer(t, server.Config{})
	attacker, aClock := session(t, ts, ts.Member(t, "acme", "bot"), "bot")
	poison := strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
	res := attacker.push("p1", put(t, aClock, "notes", "shared", poison), put(t, aClock, "notes", "mine", `1`))
	require.Equal(t, syncproto.StatusRejected, res[0].Status)
	require.Equal(t, syncproto.CodeBadRequest, res[0].Code)
	require.Contains(t, res[0].Message, fmt.Sprintf("more than %d", syncproto.MaxValueDepth))
	require.Equal(t, syncproto.StatusApplied, res[1].Status, "the rest of the batch is applied")

	// A device whose clock is behind writes the same key: with the
	// poisoned value applied, its answer would carry that value as the
	// winner; refused, the key is its.
	behind := syncproto.NewClock("phone", func() time.Time { return time.Now().Add(-time.Minute) })
	victim, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	requireApplied(t, victim.push("v1", put(t, behind, "notes", "shared", `"mine"`), put(t, behind, "notes", "other", `2`)))
	_, recs := ts.Snapshot(t, ts.Member(t, "acme", "reader"))
	values := map[string]string{}
	for _, r := range recs {
		values[r.Key] = string(r.Value)
	}
	require.Equal(t, map[string]string{"shared": `"mine"`, "mine": `1`, "other": `2`}, values)
}

// Finding 6: a session that never says hello is closed after the hello
// deadline, even while its websocket stack answers pings.
func TestAbuseSessionWithoutHelloIsClosed(t *testing.T) {
	ts := startServer(t, server.Config{HelloTimeout: 200 * time.Millisecond, PingInterval: 20 * time.Millisecond})
	c := dial(t, ts, ts.Member(t, "acme", "phone"))
	c.expectRefusalClose(syncproto.CodeHelloRequired) // reading answers the pings
}

// Finding 2, the timeouts: a connection that never sends a request is
// closed by the server after the header timeout, and a kept-alive one that
// sends no next request after the idle timeout. Each is set small here and
// the others far beyond the client's wait, so a close seen within that
// wait can come only from the timeout under test.
func TestAbuseIdleConnectionsAreClosed(t *testing.T) {
	const short, long = 200 * time.Millisecond, time.Hour
	for _, tc := range []struct {
		name     string
		timeouts server.HTTPTimeouts
		request  bool // send one request first, then idle
	}{
		{"silent connection, header timeout", server.HTTPTimeouts{ReadHeader: short, Read: long, Write: long, Idle: long}, false},
		{"kept-alive connection, idle timeout", server.HTTPTimeouts{ReadHeader: long, Read: long, Write: long, Idle: short}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, server.Config{HTTPTimeouts: tc.timeouts})
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(ioTimeout)))
			br := bufio.NewReader(conn)
			if tc.request {
				_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: syncd\r\n\r\n")
				require.NoError(t, err)
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				_, err = io.Copy(io.Discard, resp.Body)
				require.NoError(t, err)
				resp.Body.Close()
				require.False(t, resp.Close, "the connection is kept alive for a next request")
			}
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the server closed the connection (not the client's wait running out)")
		})
	}
}

// Finding 2, the count: one address holds at most
// MaxConnectionsPerAddress connections.
func TestAbuseIdleConnectionsAreBounded(t *testing.T) {
	const perAddress = 5
	ts := startServer(t, server.Config{MaxConnectionsPerAddress: perAddress})
	addr := strings.TrimPrefix(ts.url, "http://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range perAddress {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		held = append(held, c)
	}
	require.Eventually(t, func() bool {
		extra, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer extra.Close()
		extra.SetReadDeadline(time.Now().Add(ioTimeout))
		_, err = bufio.NewReader(extra).ReadByte()
		return err != nil // closed at accept
	}, ioTimeout, 10*time.Millisecond, "a sixth connection from the address is refused")

	held[0].Close()
	held = held[1:]
	once := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.url+"/healthz", nil)
		resp, err := once.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, ioTimeout, 20*time.Millisecond, "a freed slot serves again")
	for _, c := range held {
		c.Close()
	}
	held = nil
	var v int
	require.Eventually(t, func() bool { // once the held slots are released
		resp, err := once.Get(ts.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "syncd_connections_refused_per_address_total "); ok {
				v, err = strconv.Atoi(n)
				return err == nil
			}
		}
		return false
	}, ioTimeout, 20*time.Millisecond)
	require.Positive(t, v)
}

// Finding 5: losing writes with large winners, in one batch, make an
// answer larger than a frame. The server leaves the largest winner values
// out (value_omitted) instead of answering internal forever, and the op
// resent alone reads its whole winner from the replay ledger.
func TestAbuseLargeWinnersStillGetAnAnswer(t *testing.T) {
	const keys, perPush = 18, 6 // 18 winners of ~256 KiB: about 4.5 MiB together
	ts := startServer(t, server.Config{})
	c, clock := session(t, ts, ts.Member(t, "acme", "laptop"), "laptop")
	big := func(i int) string {
		return `"` + strings.Repeat(string(rune('a'+i%26)), syncproto.MaxPayloadBytes-64) + `"`
	}
	older := syncproto.NewClock("laptop", func() time.Time { return time.Now().Add(-time.Hour) })
	var losers []syncproto.Mutation
	for i := 0; i < keys; i += perPush {
		var muts []syncproto.Mutation
		for k := i; k < i+perPush; k++ {
			key := fmt.Sprintf("k%d", k)
			muts = append(muts, put(t, clock, "notes", key, big(k)))
			losers = append(losers, put(t, older, "notes", key, `"older"`))
		}
		requireApplied(t, c.push(fmt.Sprintf("w%d", i), muts...))
	}

	results := c.push("losers", losers...)
	omitted := 0
	for i, r := range results {
		require.Equal(t, syncproto.StatusSuperseded, r.Status, "result %d: %s %s", i, r.Code, r.Message)
		require.Equal(t, uint64(1), r.Winner.Version)
		if r.Winner.ValueOmitted {
			omitted++
			continue
		}
		require.Equal(t, big(i), string(r.Winner.Value))
	}
	require.Positive(t, omitted, "the answer held every winner value")
	require.Less(t, omitted, keys, "more values were left out than needed")
	require.Equal(t, strconv.Itoa(omitted), ts.Metric(t, "syncd_winner_values_omitted_total"))

	// Each op resent alone: the ledger repeats the decision, whole.
	for i, r := range results {
		if !r.Winner.ValueOmitted {
			continue
		}
		again := c.push(fmt.Sprintf("again%d", i), losers[i])
		require.Equal(t, syncproto.StatusDuplicate, again[0].Status)
		require.Equal(t, syncproto.StatusSuperseded, again[0].OriginalStatus)
		require.False(t, again[0].Winner.ValueOmitted)
		require.Equal(t, big(i), string(again[0].Winner.Value))
	}
}

// noQuotas turns every per-token and per-tenant quota off, for the
// benchmarks that measure the server rather than its limits.
var noQuotas = server.Quotas{TokenMutationsPerSecond: -1, TenantMutationsPerSecond: -1, MaxConnectionsPerToken: -1, MaxConnectionsPerTenant: -1}

// metricValue is metric's value as a number (/metrics writes large ones
// with an exponent).
func (ts *testServer) metricValue(t *testing.T, series string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(ts.Metric(t, series), 64)
	require.NoError(t, err, series)
	return v
}

// quotaRefusals reads syncd_quota_refusals_total{quota=quota}.
func (ts *testServer) quotaRefusals(t *testing.T, quota string) int {
	t.Helper()
	v, err := strconv.Atoi(ts.Metric(t, `syncd_quota_refusals_total{quota="`+quota+`"}`))
	require.NoError(t, err)
	return v
}

// Finding 7: rate limits are counted in mutations, per token over all its
// sessions and per tenant over all its tokens, and meter every frame,
// undecodable ones too; another tenant pushes on.
func TestAbuseMutationQuotasPerTokenAndTenant(t *testing.T) {
	// Buckets that do not refill during the test: only the bursts count.
	// Every frame costs one, a push one per mutation: a token's burst is
	// two hellos and a full push.
	const tokenBurst = 2 + syncproto.MaxBatch
	ts := startServer(t, server.Config{
		RequestsPerSecond: 1e6, RequestBurst: 1 << 20,
		Quotas: server.Quotas{
			TokenMutationsPerSecond: 0.001, TokenMutationBurst: tokenBurst,
			TenantMutationsPerSecond: 0.001, TenantMutationBurst: 2*tokenBurst + 1,
		},
	})
	full := func(c *wsClient, clock *syncproto.Clock, id string) {
		muts := make([]syncproto.Mutation, syncproto.MaxBatch)
		for i := range muts {
			muts[i] = put(t, clock, "notes", fmt.Sprintf("%s-%d", id, i), `1`)
		}
		requireApplied(t, c.push(id, muts...))
	}
	limited := func(c *wsClient, id string) *syncproto.Error {
		e := c.recvError(id, syncproto.CodeRateLimited)
		require.Positive(t, e.RetryAfterMS, "a quota refusal says when to retry")
		return e
	}

	// One token, two sessions: the first push of max_batch mutations
	// spends the token's burst, so the other session's one-mutation push is
	// refused: the bucket is the token's, and counts mutations.
	tok := ts.Member(t, "acme", "bot")
	a1, clock := session(t, ts, tok, "bot")
	a2, _ := session(t, ts, tok, "bot")
	full(a1, clock, "p1")
	a2.send(&syncproto.Push{ID: "p2", Mutations: []syncproto.Mutation{put(t, clock, "notes", "one-more", `1`)}})
	limited(a2, "p2")
	require.Equal(t, 1, ts.quotaRefusals(t, "token_mutations"))

	// A second token of the tenant spends the rest of the tenant's burst
	// with a hello, a full push and a frame the server cannot decode:
	// that one is metered like any other, so the next is refused.
	b, bClock := session(t, ts, ts.Member(t, "acme", "bot-2"), "bot-2")
	full(b, bClock, "q1")
	b.write(websocket.MessageText, []byte(`{"type":"frobnicate","id":"q2"}`))
	b.recvError("q2", syncproto.CodeUnknownType)
	b.write(websocket.MessageText, []byte(`{"type":"frobnicate","id":"q3"}`))
	limited(b, "q3")
	require.Equal(t, 2, ts.quotaRefusals(t, "token_mutations"))

	// A third token of the tenant has its own burst left, the tenant only
	// its hello.
	c, cClock := session(t, ts, ts.Member(t, "acme", "bot-3"), "bot-3")
	c.send(&syncproto.Push{ID: "r1", Mutations: []syncproto.Mutation{put(t, cClock, "notes", "r1", `1`)}})
	limited(c, "r1")
	require.Equal(t, 1, ts.quotaRefusals(t, "tenant_mutations"))
	require.Equal(t, uint64(2*syncproto.MaxBatch), ts.head(t), "refused frames applied nothing")

	// Another tenant is untouched.
	other, oClock := session(t, ts, ts.Member(t, "other", "phone"), "phone")
	requireApplied(t, other.push("o1", put(t, oClock, "notes", "mine", `1`)))
}

// Finding 6: one token cannot hold every connection slot; other tokens of
// the same tenant still connect, and the token's freed slot serves again.
func TestAbuseOneTokenCannotHoldEveryConnection(t *testing.T) {
	const perToken = 2
	ts := startServer(t, server.Config{Quotas: server.Quotas{MaxConnectionsPerToken: perToken}})
	tok := ts.Member(t, "acme", "bot")
	var held []*wsClient
	for range perToken {
		held = append(held, dial(t, ts, tok))
	}
	for range 3 * abuseScale(t) {
		resp := refusal(t, ts, dialOptions(tok), http.StatusTooManyRequests)
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		e := httpErrorBody(t, resp)
		resp.Body.Close()
		require.Equal(t, syncproto.CodeRateLimited, e.Code)
		require.Positive(t, e.RetryAfterMS)
	}
	require.Equal(t, 3*abuseScale(t), ts.quotaRefusals(t, "token_connections"))
	session(t, ts, ts.Member(t, "acme", "phone"), "phone")

	held[0].conn.Close(websocket.StatusNormalClosure, "")
	require.Eventually(t, func() bool {
		c, _, err := tryDial(ts, dialOptions(tok))
		if err != nil {
			return false
		}
		c.conn.CloseNow()
		return true
	}, ioTimeout, 20*time.Millisecond, "the token's freed slot serves again")
}

// Finding 6: one tenant, whatever its number of tokens, cannot hold every
// session the server allows: by default it holds at most half of them, and
// another tenant still connects.
func TestAbuseOneTenantCannotHoldEveryConnection(t *testing.T) {
	const maxConns = 4 // the tenant's cap is half of it
	ts := startServer(t, server.Config{MaxConnections: maxConns})
	for i := range maxConns / 2 {
		dial(t, ts, ts.Member(t, "attacker", fmt.Sprintf("bot-%d", i)))
	}
	for i := range 3 * abuseScale(t) {
		resp := refusal(t, ts, dialOptions(ts.Member(t, "attacker", fmt.Sprintf("more-%d", i))), http.StatusTooManyRequests)
		require.Equal(t, "5", resp.Header.Get("Retry-After"))
		e := httpErrorBody(t, resp)
		resp.Body.Close()
		require.Equal(t, syncproto.CodeRateLimited, e.Code)
		require.Equal(t, int64(5000), e.RetryAfterMS)
	}
	require.Equal(t, 3*abuseScale(t), ts.quotaRefusals(t, "tenant_connections"))
	require.Zero(t, ts.quotaRefusals(t, "token_connections"))

	answersWhile(t, "a new tenant's hello and push", nil, func() {
		c, clock := session(t, ts, ts.Member(t, "victim", "phone"), "phone")
		requireApplied(t, c.push("p1", put(t, clock, "notes", "k", `1`)))
	})
}

// Finding 7: refusals, authentication failures and failed TLS handshakes
// are logged as counts per interval, not one line per event, so a peer
// cannot flood the log.
func TestAbuseRefusalsAreLoggedInAggregate(t *testing.T) {
	logs := &syncdtest.Buffer{}
	ts := startServer(t, server.Config{
		Logger:           slog.New(slog.NewJSONHandler(logs, nil)),
		EventLogInterval: 200 * time.Millisecond,
		// The refusals counted are unknown_type: room for every frame of
		// the session at make abuse's scale.
		RequestsPerSecond: 1e6, RequestBurst: 1 << 20,
	})
	n := 50 * abuseScale(t)
	for range n {
		refusedUpgrade(t, ts, dialOptions("sdk_nope_nope"), http.StatusUnauthorized)
	}
	c, _ := session(t, ts, ts.Member(t, "acme", "phone"), "phone")
	for i := range n {
		c.write(websocket.MessageText, []byte(fmt.Sprintf(`{"type":"frobnicate","id":"u%d"}`, i)))
		c.recvError(fmt.Sprintf("u%d", i), syncproto.CodeUnknownType)
	}
	// The same server behind TLS, as cmd/syncd serves it with --tls-cert:
	// peers that connect and leave without a handshake.
	tlsSrv := httptest.NewUnstartedServer(nil)
	tlsSrv.Config = ts.srv.HTTPServer(ts.srv.Handler())
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	for range n {
		conn, err := net.Dial("tcp", tlsSrv.Listener.Addr().String())
		require.NoError(t, err)
		conn.Close()
	}

	// Counts per message and code, once every event has been flushed.
	var lines map[string]int
	counts := func() map[string]int {
		lines = map[string]int{}
		out := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var rec struct {
				Msg   string
				Code  string
				Count int
			}
			require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
			if rec.Count > 0 {
				out[rec.Msg+" "+rec.Code] += rec.Count
				lines[rec.Msg+" "+rec.Code]++
			}
		}
		return out
	}
	want := map[string]int{"authentication failed unauthorized": n, "request refused unknown_type": n, "TLS handshake failed tls_handshake": n}
	require.Eventually(t, func() bool { return reflect.DeepEqual(counts(), want) }, ioTimeout, 50*time.Millisecond)
	t.Logf("%d events of each kind took %v log lines", n, lines)
	for kind, l := range lines {
		require.Less(t, l, n/2, "%s: one line per interval, not per event", kind)
	}
}

// startFrame sends the first part of a large push frame and stalls: the
// server has admitted a frame it cannot finish reading.
func startFrame(t *testing.T, c *wsClient) io.WriteCloser {
	t.Helper()
	// The writer lives as long as the test: its context bounds every
	// later write of the frame.
	w, err := c.conn.Writer(t.Context(), websocket.MessageText)
	require.NoError(t, err)
	_, err = w.Write([]byte(`{"type":"push","id":"stalled","mutations":[` + strings.Repeat(" ", 64<<10)))
	require.NoError(t, err)
	return w
}

// Finding 7: frames being read, decoded or applied share one byte budget:
// beyond it a session's frame waits (unread) until other frames are done,
// and a frame that stalls midway is cut after FrameReadTimeout, its budget
// given back.
func TestAbuseFramesShareOneByteBudget(t *testing.T) {
	t.Run("waits", func(t *testing.T) {
		// A budget of one largest frame: while a frame is in flight,
		// every other waits.
		ts := startServer(t, server.Config{FrameBudgetBytes: 1, FrameReadTimeout: time.Minute})
		a, _ := session(t, ts, ts.Member(t, "acme", "a"), "a")
		b, bClock := session(t, ts, ts.Member(t, "other", "b"), "b")
		w := startFrame(t, a)
		require.Eventually(t, func() bool {
			return ts.metricValue(t, "syncd_frame_budget_bytes") == syncproto.MaxFrameBytes
		}, ioTimeout, 10*time.Millisecond, "the stalled frame holds the budget")
		b.send(&syncproto.Push{ID: "b1", Mutations: []syncproto.Mutation{put(t, bClock, "notes", "k", `1`)}})
		require.Eventually(t, func() bool { return ts.metricValue(t, "syncd_frame_budget_waits_total") == 1 },
			ioTimeout, 10*time.Millisecond, "the second frame waits for the budget")

		// The first frame ends (an empty push is refused bad_request, not
		// applied); then the second is read and applied.
		_, err := w.Write([]byte(`]}`))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		a.recvError("stalled", syncproto.CodeBadRequest)
		requireApplied(t, b.pushResult("b1", 1))
		require.Eventually(t, func() bool { return ts.metricValue(t, "syncd_frame_budget_bytes") == 0 }, ioTimeout, 10*time.Millisecond)
	})
	t.Run("stalled frame is cut", func(t *testing.T) {
		ts := startServer(t, server.Config{FrameReadTimeout: 200 * time.Millisecond})
		for i := range 3 * abuseScale(t) {
			c, _ := session(t, ts, ts.Member(t, "acme", fmt.Sprintf("c%d", i)), fmt.Sprintf("c%d", i))
			startFrame(t, c)
			_, err := c.next()
			require.Error(t, err, "the connection is cut")
		}
		require.Eventually(t, func() bool { return ts.metricValue(t, "syncd_frame_budget_bytes") == 0 }, ioTimeout, 10*time.Millisecond)
		c, clock := session(t, ts, ts.Member(t, "acme", "patient"), "patient")
		requireApplied(t, c.push("p1", put(t, clock, "notes", "k", `1`)))
	})
}

// startTinyFrame sends the first bytes of a small frame and stalls. The
// websocket stack holds an unfinished frame in its buffer; a ping, which
// gets no pong here (nothing reads), pushes the buffer out.
func startTinyFrame(t *testing.T, c *wsClient) io.WriteCloser {
	t.Helper()
	w, err := c.conn.Writer(t.Context(), websocket.MessageText)
	require.NoError(t, err)
	_, err = w.Write([]byte(`{"type":"ping",`))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.conn.Ping(ctx), context.DeadlineExceeded)
	return w
}

// Finding 7: one tenant's stalled frames, small and large, from more
// sessions than the frame budget holds largest frames, delay no other
// tenant: a frame reserves the largest frame's size only once it is longer
// than its head, and one token's and one tenant's frames hold at most
// their share of the budget. The other tenant is answered while the
// stalled frames are still held, long before FrameReadTimeout cuts them.
func TestAbuseStalledFramesOfOneTenantDelayNoOther(t *testing.T) {
	// 32 stalled frames, 16 of them large, where the server's budget
	// holds 16 largest frames, a token's share 2 and a tenant's 4.
	const tokens, perToken = 4, 8
	ts := startServer(t, server.Config{FrameReadTimeout: 10 * ioTimeout})
	var attackers []*wsClient
	for i := range tokens {
		id := fmt.Sprintf("bot-%d", i)
		tok := ts.Member(t, "attacker", id)
		for range perToken {
			c, _ := session(t, ts, tok, id)
			attackers = append(attackers, c)
		}
	}
	for i, c := range attackers {
		if i%2 == 0 {
			startTinyFrame(t, c)
		} else {
			startFrame(t, c)
		}
	}
	// The small frames hold nothing; the large ones hold the tenant's
	// share, the rest wait for their token's or their tenant's.
	tenantShare := float64(server.DefaultTenantFrameBytes)
	require.Eventually(t, func() bool {
		return ts.metricValue(t, "syncd_frame_budget_bytes") == tenantShare &&
			ts.metricValue(t, `syncd_quota_waits_total{quota="token_frame_bytes"}`) > 0 &&
			ts.metricValue(t, `syncd_quota_waits_total{quota="tenant_frame_bytes"}`) > 0
	}, ioTimeout, 10*time.Millisecond, "the stalled frames hold the attacker's share")

	// A server that made these wait for the stalled frames to be cut
	// would answer after FrameReadTimeout, ten times the harness's
	// ioTimeout: the large push fails on that, the rest on their second.
	var victim *wsClient
	var clock *syncproto.Clock
	framesHeld := func() bool { return ts.metricValue(t, "syncd_frame_budget_bytes") == tenantShare }
	answersWhile(t, "another tenant's hello and push", framesHeld, func() {
		victim, clock = session(t, ts, ts.Member(t, "victim", "phone"), "phone")
		requireApplied(t, victim.push("small", put(t, clock, "notes", "small", `1`)))
	})
	answersWhile(t, "/readyz", framesHeld, func() {
		require.Equal(t, http.StatusOK, syncdtest.GetJSON(t, ts.url+"/readyz", "", nil))
	})
	big := `"` + strings.Repeat("v", syncproto.MaxPayloadBytes-64) + `"`
	muts := make([]syncproto.Mutation, 8) // ~2 MiB: a frame that takes a whole reservation
	for i := range muts {
		muts[i] = put(t, clock, "notes", fmt.Sprintf("big-%d", i), big)
	}
	requireApplied(t, victim.push("large", muts...))
	require.Eventually(t, func() bool { return ts.metricValue(t, "syncd_frame_budget_bytes") == tenantShare },
		ioTimeout, 10*time.Millisecond, "the stalled frames were still held when the victim was served")
}

// rssBytes is the process's resident set size (Linux /proc).
func rssBytes(tb testing.TB) int64 {
	tb.Helper()
	statm, err := os.ReadFile("/proc/self/statm")
	require.NoError(tb, err)
	fields := strings.Fields(string(statm))
	require.GreaterOrEqual(tb, len(fields), 2)
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	require.NoError(tb, err)
	return pages * int64(os.Getpagesize())
}

// BenchmarkAbuseParallelLargePushes is finding 7's flood: 60 sessions,
// each in its own tenant, push a ~4 MiB frame at the same moment, round
// after round. It reports the peak growth of the process's RSS (server
// and the 60 clients, which share one frame buffer) with the default
// frame budget and with the budget off.
func BenchmarkAbuseParallelLargePushes(b *testing.B) {
	const sessions, values = 60, 16
	for _, bc := range []struct {
		name   string
		budget int64
	}{{"budget=default", 0}, {"budget=off", 1 << 40}} {
		b.Run(bc.name, func(b *testing.B) {
			// Synchronous NORMAL: each round writes ~500 MiB to SQLite (values
			// and oplog), which the benchmark is not about.
			ts := startServer(b, server.Config{FrameBudgetBytes: bc.budget, Quotas: noQuotas, RequestsPerSecond: 1e9, RequestBurst: 1 << 30, RetentionInterval: -1, Synchronous: sqlitedb.Normal})
			clients := make([]*wsClient, sessions)
			var clock *syncproto.Clock
			for i := range clients {
				clients[i], clock = session(b, ts, ts.Member(b, fmt.Sprintf("t%d", i), "bench"), "bench")
			}
			big := `"` + strings.Repeat("x", syncproto.MaxPayloadBytes-4<<10) + `"`
			muts := make([]syncproto.Mutation, values)
			for i := range muts {
				muts[i] = put(b, clock, "notes", fmt.Sprintf("k%d", i), big)
			}
			frame, err := syncproto.Encode(&syncproto.Push{ID: "big", Mutations: muts})
			require.NoError(b, err)
			require.LessOrEqual(b, len(frame), syncproto.MaxFrameBytes)

			runtime.GC()
			debug.FreeOSMemory()
			base := rssBytes(b)
			var peak atomic.Int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					if r := rssBytes(b); r > peak.Load() {
						peak.Store(r)
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			b.SetBytes(int64(sessions * len(frame)))
			b.ResetTimer()
			for range b.N {
				errs := make(chan error, sessions)
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Go(func() {
						// A round is disk-bound: tens of seconds on a slow disk.
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
						defer cancel()
						if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
							errs <- err
							return
						}
						_, answer, err := c.conn.Read(ctx)
						if err == nil && !bytes.Contains(answer, []byte(`"push_result"`)) {
							err = fmt.Errorf("answer %.200s", answer)
						}
						errs <- err
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(b, err)
				}
			}
			b.StopTimer()
			close(stop)
			<-sampled
			b.ReportMetric(float64(peak.Load()-base)/(1<<20), "peak-rss-growth-MiB")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-rss-MiB")
		})
	}
}
