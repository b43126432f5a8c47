package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/syncproto"
)

// browserPage is a syncd client in plain JavaScript, as a web app would
// write one from PROTOCOL.md: it presents its token as a second
// subprotocol entry (a browser's WebSocket cannot set Authorization),
// pushes a write, reads it back through the change feed, fetches the
// snapshot as a resync would (a cross-origin fetch with Authorization) and
// posts what it saw to /result on its own origin.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<html><body><script>
const report = (r) => fetch("/result", {method: "POST", body: JSON.stringify(r)});
const key = "from-a-browser";
const got = {};
let ws;
try {
  ws = new WebSocket({{.URL}}, ["syncproto.v1", "syncproto.bearer." + {{.Token}}]);
} catch (e) {
  report({error: "new WebSocket: " + e});
}
const stamp = (logical) => Date.now() + "." + logical + ".browser";
ws.onopen = () => {
  got.protocol = ws.protocol;
  ws.send(JSON.stringify({type: "hello", id: "h1", client_id: "browser", cursor: 0, hlc: stamp(0)}));
};
ws.onmessage = (ev) => {
  const m = JSON.parse(ev.data);
  if (m.type === "welcome") {
    ws.send(JSON.stringify({type: "subscribe", id: "s1", cursor: 0}));
    ws.send(JSON.stringify({type: "push", id: "p1", mutations: [{
      op_id: crypto.randomUUID(), model: "notes", key: key, op: "put",
      value: {text: "written in a browser"}, hlc: stamp(1)}]}));
  } else if (m.type === "push_result") {
    got.status = m.results[0].status;
    got.seq = m.results[0].seq;
  } else if (m.type === "changes") {
    for (const e of m.entries) {
      if (e.key === key) { got.fed = e.value; got.fedSeq = e.seq; }
    }
  } else if (m.type === "error") {
    report({error: m.code + ": " + m.message});
  }
  if (got.status && got.fed && !got.snapshotAsked) {
    got.snapshotAsked = true;
    fetch({{.SnapshotURL}}, {headers: {Authorization: "Bearer " + {{.Token}}}})
      .then((r) => r.text().then((body) => {
        const lines = body.trim().split("\n").map((l) => JSON.parse(l));
        got.snapshotStatus = r.status;
        got.snapshotHead = lines[0].head;
        got.snapshotKeys = lines.slice(1, -1).map((l) => l.key);
        report(got);
        ws.close(1000);
      }))
      .catch((e) => report({error: "snapshot: " + e}));
  }
};
ws.onclose = (ev) => { if (!got.snapshotAsked) report({error: "closed " + ev.code + " " + ev.reason}); };
</script></body></html>`))

// browserResult is what the page posts.
type browserResult struct {
	Error    string          `json:"error"`
	Protocol string          `json:"protocol"`
	Status   string          `json:"status"`
	Seq      uint64          `json:"seq"`
	Fed      json.RawMessage `json:"fed"`
	FedSeq   uint64          `json:"fedSeq"`

	SnapshotStatus int      `json:"snapshotStatus"`
	SnapshotHead   uint64   `json:"snapshotHead"`
	SnapshotKeys   []string `json:"snapshotKeys"`
}

// TestBrowserConnectsWithTokenInSubprotocol runs the page above in a real
// headless Chromium (Debian's chromium; `make test` installs it) against a
// real syncd whose origin allow-list admits the page's origin. It never
// skips: without Chromium it fails and says how to install it.
func TestBrowserConnectsWithTokenInSubprotocol(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	require.NoError(t, err, "the browser test needs Debian's chromium: run `make deps` (apt-get install chromium)")

	ts := startServer(t, server.Config{AllowedOrigins: []string{"127.0.0.1:*"}})
	token := ts.Member(t, "acme", "browser")

	results := make(chan browserResult, 1)
	var once sync.Once
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			if err := browserPage.Execute(w, map[string]string{"URL": ts.syncURL(), "SnapshotURL": ts.url + syncproto.SnapshotPath, "Token": token}); err != nil {
				once.Do(func() { results <- browserResult{Error: "page: " + err.Error()} })
			}
		case "/result":
			var res browserResult
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			if err := json.Unmarshal(body, &res); err != nil {
				res.Error = fmt.Sprintf("undecodable result %q: %v", body, err)
			}
			once.Do(func() { results <- res })
		default:
			http.NotFound(w, r)
		}
	}))
	defer page.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), page.URL+"/")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	defer func() {
		cancel()
		cmd.Wait()
	}()

	var res browserResult
	select {
	case res = <-results:
	case <-ctx.Done():
		t.Fatalf("the browser reported nothing within a minute; chromium said:\n%s", out.String())
	}
	require.Empty(t, res.Error, "the browser's client failed")
	require.Equal(t, syncproto.Subprotocol, res.Protocol, "the server selected syncproto.v1, not the token entry")
	require.Equal(t, string(syncproto.StatusApplied), res.Status)
	require.Equal(t, res.Seq, res.FedSeq, "the change feed carried the write back")
	require.JSONEq(t, `{"text":"written in a browser"}`, string(res.Fed))
	require.Equal(t, http.StatusOK, res.SnapshotStatus, "the page fetched the snapshot across origins")
	require.GreaterOrEqual(t, res.SnapshotHead, res.Seq)
	require.Contains(t, res.SnapshotKeys, "from-a-browser")

	entries := ts.Oplog(t, "&tenant=acme")
	require.NotEmpty(t, entries)
	require.Equal(t, "from-a-browser", entries[len(entries)-1].Key)
}
