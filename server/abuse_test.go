package server_test

// The abuse suite: each test reproduces a finding of the attack review
// (issue "One tenant, one token or one slow peer must never hurt the
// others") against a real syncd and asserts the defence. Counts are small
// enough for `make test`; `make abuse` runs the suite with the heavier
// counts of SYNCD_ABUSE_SCALE.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/server"
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

// answersWithin requires fn to finish within d and logs how long it took.
// d is generous: it tells a server that answers from one that is frozen,
// not a fast machine from a slow one.
func answersWithin(t *testing.T, what string, d time.Duration, fn func()) {
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
	case <-time.After(d):
		t.Fatalf("%s did not answer within %s", what, d)
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
	victim, vClock := session(t, ts, ts.member(t, "victim", "phone"), "phone")
	// The victim's offline write, made now, delivered after the flood.
	offline := put(t, vClock, "notes", "offline", `"written on a plane"`)
	// Victim conflicts: writes that lose LWW to a newer one.
	requireApplied(t, victim.push("v0", put(t, vClock, "notes", "contested", `"newest"`)))
	older := syncproto.NewClock("phone", func() time.Time { return time.Now().Add(-time.Hour) })
	for i := range 3 {
		res := victim.push(fmt.Sprintf("v%d", i+1), put(t, older, "notes", "contested", `"older"`))
		require.Equal(t, syncproto.StatusSuperseded, res[0].Status)
	}

	attacker, aClock := session(t, ts, ts.member(t, "attacker", "bot"), "bot")
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
	var theirs []server.Conflict
	ts.Admin(t, "/v1/admin/conflicts?tenant=attacker&limit=1000", &theirs)
	require.Len(t, theirs, perTenant, "the attacker's own conflict log was pruned to its bound")

	res := victim.push("late", offline)
	require.Equal(t, syncproto.StatusApplied, res[0].Status, "the other tenant's flood expired this write: %+v", res[0])
	var conflicts []server.Conflict
	ts.Admin(t, "/v1/admin/conflicts?tenant=victim", &conflicts)
	require.Len(t, conflicts, 3, "the victim's conflict history survived")
}

// Finding 3: stalled snapshot downloads (clients that stop reading) hold
// neither the connections nor the attention other requests need, and are
// cut after the per-write deadline.
func TestAbuseStalledSnapshotsFreezeNobody(t *testing.T) {
	ts := startServer(t, server.Config{MaxConcurrentSnapshots: 2, SnapshotWriteTimeout: 300 * time.Millisecond})
	writer, clock := session(t, ts, ts.member(t, "acme", "seeder"), "seeder")
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
		resp := get(t, ts.url+syncproto.SnapshotPath, ts.member(t, "acme", fmt.Sprintf("device-%d", i)))
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

	answersWithin(t, "/readyz", 5*time.Second, func() {
		require.Equal(t, http.StatusOK, getJSON(t, ts.url+"/readyz", "", nil))
	})
	answersWithin(t, "a new tenant's hello and push", 5*time.Second, func() {
		c, clock := session(t, ts, ts.member(t, "newcomer", "phone"), "phone")
		requireApplied(t, c.push("p1", put(t, clock, "notes", "hello", `1`)))
	})
	answersWithin(t, "the admin API", 5*time.Second, func() { ts.Status(t) })

	// The stalled readers are cut by the write deadline and their slots
	// come back.
	require.Eventually(t, func() bool {
		v, _ := strconv.Atoi(ts.metric(t, "syncd_snapshots_cut_total"))
		return v == len(stalled)
	}, ioTimeout, 20*time.Millisecond)
	for _, resp := range stalled {
		resp.Body.Close()
	}
	_, recs := ts.snapshot(t, ts.member(t, "acme", "patient"))
	require.Equal(t, 20*abuseScale(t)*50, len(recs), "a reader that reads gets the whole snapshot")
}

// Finding 6: a session that never says hello is closed after the hello
// deadline, even while its websocket stack answers pings.
func TestAbuseSessionWithoutHelloIsClosed(t *testing.T) {
	ts := startServer(t, server.Config{HelloTimeout: 200 * time.Millisecond, PingInterval: 20 * time.Millisecond})
	c := dial(t, ts, ts.member(t, "acme", "phone"))
	c.expectRefusalClose(syncproto.CodeHelloRequired) // reading answers the pings
}

// Finding 2: idle HTTP connections cannot pile up. Every listener has
// header, read, write and idle timeouts, and one address holds at most
// MaxConnectionsPerAddress connections.
func TestAbuseIdleConnectionsAreBounded(t *testing.T) {
	hs := server.NewHTTPServer(http.NotFoundHandler(), nil)
	require.Positive(t, hs.ReadHeaderTimeout)
	require.Positive(t, hs.ReadTimeout)
	require.Positive(t, hs.WriteTimeout)
	require.Positive(t, hs.IdleTimeout)
	require.Positive(t, hs.MaxHeaderBytes)

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
	c, clock := session(t, ts, ts.member(t, "acme", "laptop"), "laptop")
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
	require.Equal(t, strconv.Itoa(omitted), ts.metric(t, "syncd_winner_values_omitted_total"))

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
