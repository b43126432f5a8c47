package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/server"
	"github.com/syncd-dev/syncd/server/auth"
	"github.com/syncd-dev/syncd/server/console"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// screenshotsEnv names the directory the browser test writes a PNG of
// every page to (make console-screenshots sets it to docs/console); unset,
// it takes none.
const screenshotsEnv = "SYNCD_CONSOLE_SCREENSHOTS"

// device is a minimal sync client over a real websocket: enough to be a
// session the console shows and disconnects.
type device struct {
	t     testing.TB
	conn  *websocket.Conn
	clock *syncproto.Clock
}

func connect(t testing.TB, srv *syncdtest.Server, token, clientID string, clock *syncproto.Clock) *device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), syncdtest.Timeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, srv.SyncURL(), &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	require.NoError(t, err)
	conn.SetReadLimit(4 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	d := &device{t: t, conn: conn, clock: clock}
	d.send(&syncproto.Hello{ID: "h1", ClientID: clientID, HLC: clock.Now()})
	_, ok := d.recv().(*syncproto.Welcome)
	require.True(t, ok, "welcome")
	return d
}

func (d *device) send(msg syncproto.Message) {
	d.t.Helper()
	frame, err := syncproto.Encode(msg)
	require.NoError(d.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), syncdtest.Timeout)
	defer cancel()
	require.NoError(d.t, d.conn.Write(ctx, websocket.MessageText, frame))
}

func (d *device) tryRecv() (syncproto.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), syncdtest.Timeout)
	defer cancel()
	_, frame, err := d.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	return syncproto.Decode(frame)
}

func (d *device) recv() syncproto.Message {
	d.t.Helper()
	msg, err := d.tryRecv()
	require.NoError(d.t, err)
	return msg
}

// push writes values (key -> JSON value) of model in one push and returns
// the results.
func (d *device) push(model string, values map[string]string) []syncproto.Result {
	d.t.Helper()
	p := &syncproto.Push{ID: "p"}
	for k, v := range values {
		id, err := syncproto.NewOpID()
		require.NoError(d.t, err)
		p.Mutations = append(p.Mutations, syncproto.Mutation{OpID: id, Model: model, Key: k, Op: syncproto.OpPut, Value: []byte(v), HLC: d.clock.Now()})
	}
	d.send(p)
	res, ok := d.recv().(*syncproto.PushResult)
	require.True(d.t, ok, "push_result")
	require.Len(d.t, res.Results, len(p.Mutations))
	return res.Results
}

// screenshot writes a PNG of the tab's viewport as name.png under the
// directory screenshotsEnv names, when it names one.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return
	}
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// browser starts headless Chromium (Debian's, which make deps installs)
// and returns a tab context bounded by the test's budget.
func browser(t *testing.T) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	require.NoError(t, err, "the console test needs Debian's chromium: run `make deps` (apt-get install chromium)")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // about 15 s alone; generous for a loaded machine
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 860))
	t.Cleanup(acancel)
	tab, tcancel := chromedp.NewContext(actx)
	t.Cleanup(tcancel)
	return tab
}

// watch listens to the tab for script dialogs and console errors; the
// returned func reads what it heard so far. A refused request logs
// "Failed to load resource" (the tests make some on purpose); anything
// else of type error, a CSP violation included, counts.
func watch(t *testing.T, tab context.Context) func() (dialogs, consoleErrors []string) {
	t.Helper()
	var dialogs, consoleErrors []string
	var mu sync.Mutex
	require.NoError(t, chromedp.Listen(tab, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, d.Message)
			mu.Unlock()
		}
	}))
	messages := chromedp.Console(tab)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || (m.Type == "error" && !strings.HasPrefix(m.Text, "Failed to load resource")) {
				mu.Lock()
				consoleErrors = append(consoleErrors, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(dialogs), slices.Clone(consoleErrors)
	}
}

// logIn logs the tab in at the console under base with token and waits
// for the overview.
func logIn(t *testing.T, tab context.Context, base, token string) {
	t.Helper()
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"login"), chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.ID("live"))))
}

// text reads the text of the first element sel matches, waiting for it to
// exist. It reads in one evaluation, so the live refresh replacing the
// element's text meanwhile cannot fail it.
func text(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	var out string
	eventually(t, "an element "+sel, 10*time.Second, func() bool {
		s, err := chromedp.Run(tab, chromedp.Evaluate[*string](fmt.Sprintf(`((e) => e ? (e.innerText ?? e.textContent) : null)(document.querySelector(%q))`, sel)))
		if err != nil || s == nil {
			return false
		}
		out = strings.TrimSpace(*s)
		return true
	})
	return out
}

// eventually polls cond every 200 ms until it holds or the budget ends.
func eventually(t *testing.T, what string, budget time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(budget); ; time.Sleep(200 * time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, budget)
		}
	}
}

// TestConsoleInABrowser drives the console in a real headless Chromium
// against a real syncd on loopback: log in with the admin token, watch the
// overview's live figures move as a device pushes 10,000 entries, page
// the oplog, open one key's history, look an op id up, see a device with
// its cursor and disconnect it (its websocket really closes, 1001), and
// show that values holding markup stay text (no dialog, no console error)
// and that requests without the CSRF token or without the admin token
// change nothing. With SYNCD_CONSOLE_SCREENSHOTS set it also writes a PNG
// of every page there.
func TestConsoleInABrowser(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{})
	writer := connect(t, srv, srv.Member(t, "acme", "writer"), "writer", syncproto.NewClock("writer", nil))
	phone := connect(t, srv, srv.Member(t, "acme", "phone"), "phone", syncproto.NewClock("phone", nil))
	phone.send(&syncproto.Subscribe{ID: "s1"})

	const xss = `{"text":"<script>alert('xss')</script>","img":"\"><img src=x onerror=alert(1)>"}`
	xssRes := writer.push("notes", map[string]string{"hostile": xss})
	require.Equal(t, syncproto.StatusApplied, xssRes[0].Status)
	// A write stamped a minute in the past loses to the one above: a
	// conflict-log row for the conflicts page.
	late := &device{t: t, conn: writer.conn, clock: syncproto.NewClock("writer", func() time.Time { return time.Now().Add(-time.Minute) })}
	require.Equal(t, syncproto.StatusSuperseded, late.push("notes", map[string]string{"hostile": `{"text":"older"}`})[0].Status)

	tab := browser(t)
	troubles := watch(t, tab)
	shoot := func(name string) { screenshot(t, tab, name) }
	base := srv.AdminURL + console.Path

	// Without a session the console sends the browser to the login form.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"devices")))
	loc, err := chromedp.Run(tab, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, base+"login", loc)
	shoot("login")
	require.NoError(t, chromedp.Do(tab, chromedp.SendKeys(chromedp.ID("token"), "not-a-token"), chromedp.Click(chromedp.ID("login"))))
	require.Contains(t, text(t, tab, "#flash"), "not an admin token")
	logIn(t, tab, base, srv.AdminToken)

	// Overview: the build and the live figures, which move as the writer
	// pushes 10,000 entries.
	require.NotEmpty(t, text(t, tab, "#build"))
	require.Equal(t, "ready", text(t, tab, "#ready"))
	require.Equal(t, "2", text(t, tab, "#connections"))
	for b := range 20 {
		values := map[string]string{}
		for i := range syncproto.MaxBatch {
			values[fmt.Sprintf("k%05d", b*syncproto.MaxBatch+i)] = fmt.Sprintf(`{"n":%d}`, b*syncproto.MaxBatch+i)
		}
		writer.push("notes", values)
	}
	head := srv.Status(t).OplogHead
	require.Equal(t, uint64(10_001), head, "the superseded write took no seq")
	eventually(t, "the overview shows the applies", 20*time.Second, func() bool {
		max := text(t, tab, "#chart-applied text")
		return strings.HasPrefix(max, "max ") && !strings.HasPrefix(max, "max 0 ")
	})
	eventually(t, "the overview's head follows", 10*time.Second, func() bool {
		return text(t, tab, "#head") == strconv.FormatUint(head, 10)
	})
	// The ledger holds a decision per mutation, the superseded one
	// included, and the overview's count follows it live (it once stayed
	// at its page-load value).
	require.Equal(t, int(head+1), srv.Status(t).LedgerEntries)
	eventually(t, "the overview's ledger count follows", 10*time.Second, func() bool {
		return text(t, tab, "#ledger") == strconv.FormatUint(head+1, 10)
	})
	shoot("overview")

	// The oplog pages on the server: 100 rows, then the next 100.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"data?tenant=acme")))
	require.Equal(t, "1", text(t, tab, "#oplog tbody tr:first-child td.seq"))
	require.Equal(t, "100", text(t, tab, "#oplog tbody tr:last-child td.seq"))
	shoot("data")
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("next")), chromedp.WaitVisible(chromedp.CSS("#oplog"))))
	eventually(t, "the second page", 10*time.Second, func() bool {
		return text(t, tab, "#oplog tbody tr:first-child td.seq") == "101"
	})
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("newest")), chromedp.WaitVisible(chromedp.CSS("#oplog"))))
	eventually(t, "the newest page", 10*time.Second, func() bool {
		return text(t, tab, "#oplog tbody tr:last-child td.seq") == strconv.FormatUint(head, 10)
	})

	// Values holding markup are text: shown only when asked for, escaped.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"key?tenant=acme&model=notes&key=hostile&values=1")))
	shown := text(t, tab, "#key-entries td.value")
	require.Contains(t, shown, "<script>alert('xss')</script>")
	require.Contains(t, shown, `"><img src=x onerror=alert(1)>`)
	imgs, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("main img, main script").length`))
	require.NoError(t, err)
	require.Zero(t, imgs, "no element came from a value")
	require.Contains(t, text(t, tab, "#key-conflicts"), "lww")
	shoot("key")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"conflicts?values=1")))
	require.Contains(t, text(t, tab, "#conflicts"), "hostile")
	shoot("conflicts")

	// Op lookup answers what the ledger decided.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"op"),
		chromedp.SendKeys(chromedp.ID("op-tenant"), "acme"), chromedp.SendKeys(chromedp.ID("op-id"), xssRes[0].OpID),
		chromedp.Click(chromedp.ID("op-lookup")), chromedp.WaitVisible(chromedp.ID("op-answer"))))
	require.Equal(t, "applied", text(t, tab, "#op-status"))
	require.Contains(t, text(t, tab, "#op-why"), fmt.Sprintf("seq %d", xssRes[0].Seq))
	shoot("op")

	// The phone reads the feed to the head; the devices page shows its
	// cursor.
	for cursor := uint64(0); cursor < head; {
		if ch, ok := phone.recv().(*syncproto.Changes); ok {
			cursor = max(cursor, ch.Cursor)
		}
	}
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"devices")))
	eventually(t, "the phone's cursor at the head", 10*time.Second, func() bool {
		require.NoError(t, chromedp.Do(tab, chromedp.Reload()))
		return text(t, tab, `#devices tr[data-client="phone"] td.cursor`) == strconv.FormatUint(head, 10)
	})
	require.Equal(t, fmt.Sprintf("%d op(s)", syncproto.MaxBatch), strings.SplitN(text(t, tab, `#devices tr[data-client="writer"] td.last-push`), ", ", 2)[1])
	require.Equal(t, "none", text(t, tab, `#devices tr[data-client="phone"] td.last-push`))
	shoot("devices")

	// A post that rides on the cookie alone, or with a forged CSRF token,
	// is refused and disconnects nothing.
	for _, body := range []string{"tenant=acme&client_id=phone", "tenant=acme&client_id=phone&csrf=forged"} {
		status, err := chromedp.Run(tab, chromedp.Evaluate[int](fmt.Sprintf(
			`fetch("/console/devices/disconnect", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q}).then((r) => r.status)`, body),
			chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, status, body)
	}
	// Without the admin token: no session, a device's token, nothing.
	for _, token := range []string{"", srv.Member(t, "acme", "intruder")} {
		req, err := http.NewRequest(http.MethodPost, base+"devices/disconnect", strings.NewReader("tenant=acme&client_id=phone"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, http.StatusUnauthorized, syncdtest.GetJSON(t, base+"live.json", token, nil))
	}
	var sessions []adminapi.Session
	srv.Admin(t, adminapi.PathSessions, &sessions)
	require.Len(t, sessions, 2, "the refused requests disconnected nothing")

	// Every answer carries the policy.
	resp := syncdtest.Get(t, base+"login", "")
	resp.Body.Close()
	require.Equal(t, console.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"))
	require.Contains(t, console.ContentSecurityPolicy, "default-src 'self'")
	require.Contains(t, console.ContentSecurityPolicy, "frame-ancestors 'none'")

	// Disconnect the phone from its row: its session really ends.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#devices tr[data-client="phone"] button`)), chromedp.WaitVisible(chromedp.ID("flash"))))
	require.Contains(t, text(t, tab, "#flash"), "disconnected acme/phone: 1 session")
	flashes, err := chromedp.Run(tab, chromedp.Evaluate[int](`(location.assign("/console/devices?done=spoofed"), 0)`))
	require.NoError(t, err)
	require.Zero(t, flashes)
	eventually(t, "the devices page without a message from the URL", 10*time.Second, func() bool {
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](`location.search === "?done=spoofed" && document.readyState === "complete" ? document.querySelectorAll("#flash").length : -1`))
		return err == nil && n == 0
	})
	for {
		_, err := phone.tryRecv()
		if err != nil {
			require.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "the phone's session closed going-away: %v", err)
			break
		}
	}
	eventually(t, "the phone leaves the sessions", 10*time.Second, func() bool {
		srv.Admin(t, adminapi.PathSessions, &sessions)
		return len(sessions) == 1 && sessions[0].ClientID == "writer"
	})
	require.Equal(t, 1.0, srv.MetricValue(t, "syncd_operator_disconnects_total"))
	require.GreaterOrEqual(t, srv.MetricValue(t, `syncd_console_refusals_total{reason="csrf"}`), 2.0)

	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"tenants"), chromedp.WaitVisible(chromedp.CSS("main"))))
	shoot("tenants")
	require.Equal(t, "1", text(t, tab, `#tenants tr[data-tenant="acme"] td.sessions`), "the writer; the phone left")
	require.Equal(t, strconv.FormatUint(head+1, 10), text(t, tab, `#tenants tr[data-tenant="acme"] td.served`), "every mutation of the tenant, the superseded one included")
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"cluster"), chromedp.WaitVisible(chromedp.CSS("main"))))
	require.Contains(t, text(t, tab, "#single"), "single node")

	dialogs, consoleErrors := troubles()
	require.Empty(t, dialogs, "no script from a value ran")
	require.Empty(t, consoleErrors, "the pages ran without errors (a CSP violation is one)")
}

// TestConsoleSessionsAndRefusals covers the console's rules without a
// browser: a login opens a cookie session with the promised attributes,
// the session ends at logout (with the CSRF token of its pages) and at
// its first request after its token is revoked, a cross-origin post is
// refused, a bearer header needs no CSRF token, and bad parameters get a
// 400 page.
func TestConsoleSessionsAndRefusals(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{})
	base := srv.AdminURL + console.Path
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	login := func(token string) *http.Cookie {
		t.Helper()
		resp, err := noRedirect.PostForm(base+"login", url.Values{"token": {token}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Len(t, resp.Cookies(), 1)
		return resp.Cookies()[0]
	}
	ck := login(srv.AdminToken)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, console.Path, ck.Path)
	require.False(t, ck.Secure, "plain HTTP on loopback: Secure only over TLS")

	get := func(path string, ck *http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusOK, get("devices", ck).StatusCode)
	require.Equal(t, http.StatusOK, get("live.json", ck).StatusCode)

	// A cross-origin post is refused even with the cookie.
	req, err := http.NewRequest(http.MethodPost, base+"logout", strings.NewReader("csrf=x"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	req.AddCookie(ck)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, http.StatusOK, get("devices", ck).StatusCode, "the refused logout ended nothing")

	// The bearer header alone serves a post (no CSRF token: a browser
	// never sends that header across sites): the API answers 404 for a
	// device with no session, and the console says so.
	req, err = http.NewRequest(http.MethodPost, base+"devices/disconnect", strings.NewReader("tenant=acme&client_id=nobody"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+srv.AdminToken)
	resp, err = noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "has+no+session")

	// The API answers the disconnect of an unknown device 404 and a
	// missing name 400.
	for q, want := range map[string]int{"tenant=acme&client_id=nobody": http.StatusNotFound, "tenant=acme": http.StatusBadRequest} {
		req, err := http.NewRequest(http.MethodPost, srv.AdminURL+adminapi.PathDisconnect+"?"+q, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+srv.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "%s: %s", q, body)
	}

	// Bad parameters get a clear 400 page and ask nothing.
	for path, want := range map[string]string{
		"data?from=abc":                  "from: want a non-negative integer",
		"op?tenant=acme&op_id=not-an-op": "op_id",
		"key?tenant=acme&model=notes":    "needs its tenant, model and key",
		"conflicts?before=-1":            "before: want a non-negative integer",
	} {
		resp := syncdtest.Get(t, base+path, srv.AdminToken)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		require.Contains(t, string(body), want, path)
	}

	// A second login, then logout ends only that one.
	other := login(srv.AdminToken)
	require.Equal(t, 2.0, srv.MetricValue(t, "syncd_console_sessions"))
	req, err = http.NewRequest(http.MethodGet, base, nil)
	require.NoError(t, err)
	req.AddCookie(other)
	resp, err = noRedirect.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(page)
	require.NotNil(t, csrf, "the page carries its session's CSRF token")
	req, err = http.NewRequest(http.MethodPost, base+"logout", strings.NewReader("csrf="+string(csrf[1])))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(other)
	resp, err = noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusSeeOther, get("", other).StatusCode, "logged out: to the login form")
	require.Equal(t, http.StatusOK, get("", ck).StatusCode, "the other session lives on")
	require.Equal(t, 1.0, srv.MetricValue(t, "syncd_console_sessions"))
	require.Equal(t, http.StatusSeeOther, get("", nil).StatusCode, "no cookie: to the login form")
	require.Equal(t, http.StatusUnauthorized, get("live.json", nil).StatusCode)
	require.Equal(t, 2.0, srv.MetricValue(t, `syncd_console_logins_total{result="ok"}`))

	// A session whose admin token is revoked ends at its next request.
	token := srv.Issue(t, auth.Principal{Admin: true})
	revoked := login(token)
	require.Equal(t, http.StatusOK, get("", revoked).StatusCode)
	a, err := auth.NewAuthenticator(srv.TokenPath, nil)
	require.NoError(t, err)
	p, err := a.Authenticate(token)
	require.NoError(t, a.Close())
	require.NoError(t, err)
	require.NoError(t, auth.Revoke(srv.TokenPath, p.TokenID))
	eventually(t, "the revoked token's session ended", 10*time.Second, func() bool {
		resp := get("", revoked)
		return resp.StatusCode == http.StatusSeeOther && strings.HasSuffix(resp.Header.Get("Location"), "login?why=refused")
	})
	require.Equal(t, http.StatusSeeOther, get("devices", revoked).StatusCode, "and stays ended")
	// The login form says why, in its own words only: a link cannot put
	// text on the page.
	for why, want := range map[string]string{"refused": "its admin token was refused", "<b>you+were+hacked</b>": ""} {
		resp := syncdtest.Get(t, base+"login?why="+why, "")
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		if want == "" {
			require.NotContains(t, string(body), "hacked")
			require.NotContains(t, string(body), `id="flash"`)
		} else {
			require.Contains(t, string(body), want)
		}
	}
	require.Equal(t, http.StatusOK, get("", ck).StatusCode, "the other token's session lives on")
}

// TestConsoleClusterPageShowsANodeDown runs the console of a three-node
// cluster in a real Chromium: every node is listed ready with its applied
// seq, lag and the lease holder; once one node stops, its reports stop
// and the page shows it down while the others stay ready.
func TestConsoleClusterPageShowsANodeDown(t *testing.T) {
	nodes := syncdtest.StartCluster(t, 3, server.Config{})
	writer := connect(t, nodes[0], nodes[0].Member(t, "acme", "writer"), "writer", syncproto.NewClock("writer", nil))
	writer.push("notes", map[string]string{"a": `{"n":1}`, "b": `{"n":2}`})
	tab := browser(t)
	base := nodes[0].AdminURL + console.Path
	logIn(t, tab, base, nodes[0].AdminToken)
	state := func(node string) string { return text(t, tab, `#nodes tr[data-node="`+node+`"] td.state`) }
	eventually(t, "every node reported ready", 30*time.Second, func() bool {
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"cluster")))
		return state("node-1") == "ready" && state("node-2") == "ready" && state("node-3") == "ready"
	})
	eventually(t, "a lease holder", 30*time.Second, func() bool {
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"cluster")))
		return strings.HasPrefix(text(t, tab, "#lease-holder"), "node-")
	})
	_, err := strconv.ParseUint(text(t, tab, "#lease-token"), 10, 64)
	require.NoError(t, err, "the holder's fencing token is a revision")
	require.NotEmpty(t, text(t, tab, "#stream-leader"))
	require.NotContains(t, text(t, tab, "#stream-leader"), "none")
	require.Contains(t, text(t, tab, "#nats-servers"), "connected")
	require.Len(t, strings.Split(text(t, tab, "#replicas tbody"), "\n"), 2, "two followers of a stream of three replicas")
	// Digest checkpoints come every 1000 stream messages: none yet.
	require.Equal(t, "none yet", text(t, tab, `#nodes tr[data-node="node-1"] td.digest-check`))
	require.Equal(t, "none yet", text(t, tab, `#nodes tr[data-node="node-1"] td.records-check`), "records checks run hourly")

	nodes[2].Stop(t)
	eventually(t, "the stopped node shown down", 30*time.Second, func() bool {
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"cluster")))
		return strings.HasPrefix(state("node-3"), "down: no report for")
	})
	require.Equal(t, "ready", state("node-1"))
	require.Equal(t, "ready", state("node-2"))
	for _, n := range []string{"node-1", "node-2"} {
		lag := text(t, tab, `#nodes tr[data-node="`+n+`"] td.lag`)
		_, err = strconv.ParseUint(lag, 10, 64)
		require.NoError(t, err, "%s's lag is a count of entries: %q", n, lag)
	}
	screenshot(t, tab, "cluster")
}

// TestConsoleKeyHistoryPages shows that one key's history is paged on the
// server: a key written 150 times shows 100 entries, each with the
// ledger's decision, and a link that continues after the 100th.
func TestConsoleKeyHistoryPages(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{})
	writer := connect(t, srv, srv.Member(t, "acme", "writer"), "writer", syncproto.NewClock("writer", nil))
	var seqs []uint64
	for i := range 150 {
		res := writer.push("notes", map[string]string{"hot": fmt.Sprintf(`{"n":%d}`, i)})
		require.Equal(t, syncproto.StatusApplied, res[0].Status)
		seqs = append(seqs, res[0].Seq)
		writer.push("notes", map[string]string{fmt.Sprintf("cold%d", i): `{}`})
	}
	page := func(from uint64) string {
		t.Helper()
		resp := syncdtest.Get(t, fmt.Sprintf("%s%skey?tenant=acme&model=notes&key=hot&from=%d", srv.AdminURL, console.Path, from), srv.AdminToken)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		return string(body)
	}
	rows := regexp.MustCompile(`(?s)<table id="key-entries">.*?</table>`)
	first := page(0)
	require.Equal(t, 100, strings.Count(rows.FindString(first), "<tr>")-1, "100 entries and the header")
	require.Equal(t, 100, strings.Count(first, "applied at "), "each with its ledger decision")
	more := regexp.MustCompile(`id="key-more">continue after seq (\d+)<`).FindStringSubmatch(first)
	require.NotNil(t, more, "a link to the rest")
	require.Equal(t, strconv.FormatUint(seqs[99], 10), more[1])
	next, err := strconv.ParseUint(more[1], 10, 64)
	require.NoError(t, err)
	second := page(next)
	require.Equal(t, 50, strings.Count(rows.FindString(second), "<tr>")-1)
	require.NotContains(t, second, `id="key-more"`, "nothing after the head")
}

// TestConsoleTokensInABrowser drives the tokens page in a real headless
// Chromium: issue a device token (shown once, never again), a device
// connects with it and pushes (the devices page shows the push), requests
// without the CSRF token change nothing, then revoke it after the
// confirmation page: the device's session is closed unauthorized at once
// (the periodic recheck is an hour away), the token is refused from then
// on, and the device is listed among the recently disconnected.
func TestConsoleTokensInABrowser(t *testing.T) {
	srv := syncdtest.Start(t, server.Config{TokenRecheck: time.Hour})
	tab := browser(t)
	troubles := watch(t, tab)
	base := srv.AdminURL + console.Path
	logIn(t, tab, base, srv.AdminToken)
	countTokens := func() int {
		t.Helper()
		tokens, err := auth.ReadFile(srv.TokenPath)
		require.NoError(t, err)
		return len(tokens)
	}
	before := countTokens()

	// Issue a device token: the answer shows it, once.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"tokens"),
		chromedp.SendKeys(chromedp.ID("issue-tenant"), "acme"), chromedp.SendKeys(chromedp.ID("issue-client"), "tablet"),
		chromedp.Click(chromedp.ID("issue")), chromedp.WaitVisible(chromedp.ID("bearer"))))
	bearer, tokenID := text(t, tab, "#bearer"), text(t, tab, "#issued-id")
	require.True(t, strings.HasPrefix(bearer, "sdk_"+tokenID+"_"), "a device token: %q", bearer)
	require.Equal(t, before+1, countTokens())
	screenshot(t, tab, "token-issued")

	// The device connects with it and pushes; the devices page shows the
	// push.
	tablet := connect(t, srv, bearer, "tablet", syncproto.NewClock("tablet", nil))
	require.Equal(t, syncproto.StatusApplied, tablet.push("notes", map[string]string{"a": `{"n":1}`})[0].Status)
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"devices")))
	require.Contains(t, text(t, tab, `#devices tr[data-client="tablet"] td.last-push`), "1 op(s)")
	require.Equal(t, "none", text(t, tab, `#devices tr[data-client="tablet"] td.last-error`))

	// The tokens page lists it with its session, and never its secret.
	require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"tokens")))
	row := `#tokens tr[data-token="` + tokenID + `"]`
	require.Equal(t, "1", text(t, tab, row+" td.sessions"))
	html, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	require.NoError(t, err)
	require.NotContains(t, html, bearer, "the token is shown once only")
	screenshot(t, tab, "tokens")

	// Without the CSRF token a post issues and revokes nothing.
	for _, post := range []struct{ path, body string }{
		{"tokens/issue", "tenant=acme&client_id=mallory"},
		{"tokens/revoke", "token_id=" + tokenID},
		{"tokens/revoke", "token_id=" + tokenID + "&csrf=forged"},
	} {
		status, err := chromedp.Run(tab, chromedp.Evaluate[int](fmt.Sprintf(
			`fetch(%q, {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q}).then((r) => r.status)`, console.Path+post.path, post.body),
			chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, status, post)
	}
	require.Equal(t, before+1, countTokens(), "the refused posts changed nothing")
	tablet.send(&syncproto.Ping{ID: "still-here"})
	_, ok := tablet.recv().(*syncproto.Pong)
	require.True(t, ok, "the tablet's session lives on")

	// Revoke, after the confirmation page: the session closes at once.
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.ID("revoke-confirm"))))
	require.Equal(t, before+1, countTokens(), "the confirmation page revokes nothing")
	screenshot(t, tab, "token-revoke")
	require.NoError(t, chromedp.Do(tab, chromedp.Click(chromedp.ID("revoke-confirm")), chromedp.WaitVisible(chromedp.ID("flash"))))
	require.Equal(t, fmt.Sprintf("revoked %s: 1 session(s) closed", tokenID), text(t, tab, "#flash"))
	require.Equal(t, before, countTokens())
	for {
		_, err := tablet.tryRecv()
		if err != nil {
			require.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(err), "the tablet's session closed unauthorized: %v", err)
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), syncdtest.Timeout)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, srv.SyncURL(), &websocket.DialOptions{
		Subprotocols: []string{syncproto.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + bearer}},
	})
	require.Error(t, err)
	require.NotNil(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the revoked token is refused")
	require.Equal(t, 1.0, srv.MetricValue(t, `syncd_admin_token_changes_total{change="revoked"}`))

	// The device is among the recently disconnected, with its last push.
	eventually(t, "the tablet among the recently disconnected", 10*time.Second, func() bool {
		require.NoError(t, chromedp.Do(tab, chromedp.Navigate(base+"devices")))
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](`(document.querySelector('#recent tr[data-client="tablet"] td.last-push') || {}).textContent || ""`))
		return err == nil && strings.Contains(s, "1 op(s)")
	})

	dialogs, consoleErrors := troubles()
	require.Empty(t, dialogs)
	require.Empty(t, consoleErrors, "the pages ran without errors (a CSP violation is one)")
}
