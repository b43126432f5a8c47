package syncproto_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/syncproto"
)

// readProtocol returns PROTOCOL.md from the repository root.
func readProtocol(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "PROTOCOL.md"))
	require.NoError(t, err)
	return string(b)
}

// exportedConsts returns the exported constants declared in the package's
// non-test files, by declared type name ("" for untyped).
func exportedConsts(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	byType := map[string][]string{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			typ := ""
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if vs.Type != nil {
					typ = vs.Type.(*ast.Ident).Name
				} else if len(vs.Values) > 0 {
					typ = "" // a new untyped run; iota continuations keep typ
				}
				for _, name := range vs.Names {
					if name.IsExported() {
						byType[typ] = append(byType[typ], name.Name)
					}
				}
			}
		}
	}
	return byType
}

// lineWith reports whether some line of doc contains every one of parts.
func lineWith(doc string, parts ...string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// TestProtocolStatesEveryLimit checks that PROTOCOL.md names every exported
// constant that is not an enumeration value (limits, defaults, paths,
// patterns) together with its value on one line, so the document and the
// code cannot drift apart.
func TestProtocolStatesEveryLimit(t *testing.T) {
	doc := readProtocol(t)
	values := map[string]string{
		"MaxFrameBytes":         fmt.Sprint(syncproto.MaxFrameBytes),
		"MaxBatch":              fmt.Sprint(syncproto.MaxBatch),
		"MaxPayloadBytes":       fmt.Sprint(syncproto.MaxPayloadBytes),
		"MaxKeyBytes":           fmt.Sprint(syncproto.MaxKeyBytes),
		"MaxModelBytes":         fmt.Sprint(syncproto.MaxModelBytes),
		"MaxIDBytes":            fmt.Sprint(syncproto.MaxIDBytes),
		"MaxRequestIDBytes":     fmt.Sprint(syncproto.MaxRequestIDBytes),
		"MaxPullLimit":          fmt.Sprint(syncproto.MaxPullLimit),
		"DefaultPullLimit":      fmt.Sprint(syncproto.DefaultPullLimit),
		"MaxMessageBytes":       fmt.Sprint(syncproto.MaxMessageBytes),
		"MaxValueDepth":         fmt.Sprint(syncproto.MaxValueDepth),
		"MaxFrameDepth":         fmt.Sprint(syncproto.MaxFrameDepth),
		"MaxSafeInteger":        fmt.Sprint(syncproto.MaxSafeInteger),
		"MaxUserBytes":          fmt.Sprint(syncproto.MaxUserBytes),
		"MaxWall":               fmt.Sprint(syncproto.MaxWall),
		"MaxValueVersion":       fmt.Sprint(syncproto.MaxValueVersion),
		"MaxAcceptedVersions":   fmt.Sprint(syncproto.MaxAcceptedVersions),
		"DefaultMaxClockSkew":   fmt.Sprint(syncproto.DefaultMaxClockSkew.Milliseconds()),
		"DefaultIdleTimeout":    fmt.Sprint(syncproto.DefaultIdleTimeout.Milliseconds()),
		"Subprotocol":           syncproto.Subprotocol,
		"SyncPath":              syncproto.SyncPath,
		"SnapshotPath":          syncproto.SnapshotPath,
		"SnapshotContentType":   syncproto.SnapshotContentType,
		"IDPattern":             syncproto.IDPattern,
		"ModelPattern":          syncproto.ModelPattern,
		"ResyncCursorExpired":   syncproto.ResyncCursorExpired,
		"MaxServerURLBytes":     fmt.Sprint(syncproto.MaxServerURLBytes),
		"MaxServers":            fmt.Sprint(syncproto.MaxServers),
		"AllValues":             syncproto.AllValues,
		"MaxScopeValueBytes":    fmt.Sprint(syncproto.MaxScopeValueBytes),
		"DefaultMaxScopeValues": fmt.Sprint(syncproto.DefaultMaxScopeValues),
		"EvictMoved":            syncproto.EvictMoved,
		"EvictRevoked":          syncproto.EvictRevoked,
		"EvictUnsubscribed":     syncproto.EvictUnsubscribed,
		"EvictNotGranted":       syncproto.EvictNotGranted,
		"ResyncScopesChanged":   syncproto.ResyncScopesChanged,
	}
	var untyped []string
	for typ, names := range exportedConsts(t) {
		switch typ {
		case "", "int64":
			untyped = append(untyped, names...)
		}
	}
	slices.Sort(untyped)
	listed := make([]string, 0, len(values))
	for name := range values {
		listed = append(listed, name)
	}
	slices.Sort(listed)
	require.Equal(t, untyped, listed, "every untyped exported constant has a value to check here")

	for name, value := range values {
		require.True(t, lineWith(doc, "`"+name+"`", value), "PROTOCOL.md has no line naming `%s` with its value %s", name, value)
	}
	// The limits table's wire names match the JSON of Limits.
	frame, err := syncproto.Encode(&syncproto.Welcome{ID: "h", NodeID: "n", ServerHLC: ts(1, 0, "n"), ServerTime: 2, DatabaseID: "db",
		Limits: syncproto.Limits{MaxFrameBytes: 1, MaxBatch: 1, MaxPayloadBytes: 1, MaxKeyBytes: 1, MaxPullLimit: 1,
			MaxRequestIDBytes: 1, MaxClockSkewMS: 1, IdleTimeoutMS: 1, RequestsPerSecond: 1, RequestBurst: 1, LedgerRetentionMS: 1}})
	require.NoError(t, err)
	limits := between(t, doc, "## 11. Limits", "## 12.")
	members := regexp.MustCompile(`"([a-z_]+)":1\b`).FindAllStringSubmatch(string(frame), -1)
	require.Len(t, members, 11)
	for _, m := range members {
		require.Contains(t, limits, "`"+m[1]+"`", "limits member %s missing from the limits table", m[1])
	}
}

// TestProtocolDocumentsEveryCode checks the error code table against Codes
// in both directions, and that Codes lists every Code constant.
func TestProtocolDocumentsEveryCode(t *testing.T) {
	doc := readProtocol(t)
	consts := exportedConsts(t)["Code"]
	require.Len(t, syncproto.Codes, len(consts), "Codes lists every Code constant")

	section := between(t, doc, "## 12. Error codes", "## 13.")
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (yes|no) \\|").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = m[2]
	}
	require.Len(t, documented, len(syncproto.Codes), "the table has one row per code, no more")
	for _, c := range syncproto.Codes {
		retry, ok := documented[string(c)]
		require.True(t, ok, "code %s is not in PROTOCOL.md's table", c)
		require.Equal(t, c.Retryable(), retry == "yes", "code %s: table says retryable=%s", c, retry)
	}
}

// TestProtocolDocumentsEveryCloseCode checks the close code table against
// CloseCodes in both directions.
func TestProtocolDocumentsEveryCloseCode(t *testing.T) {
	doc := readProtocol(t)
	require.Len(t, syncproto.CloseCodes, len(exportedConsts(t)["CloseCode"]), "CloseCodes lists every CloseCode constant")
	section := between(t, doc, "## 13. Close codes", "## 14.")
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^\| (\d{4}) \|`).FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	var want []string
	for _, c := range syncproto.CloseCodes {
		want = append(want, fmt.Sprint(uint16(c)))
	}
	require.Equal(t, want, documented)
}

// TestProtocolDocumentsEveryMessageAndStatus checks that every message type
// has its own section and every status a row in section 6.
func TestProtocolDocumentsEveryMessageAndStatus(t *testing.T) {
	doc := readProtocol(t)
	types := exportedConsts(t)["Type"]
	require.NotEmpty(t, types)
	for _, name := range types {
		typ := syncproto.Type(strings.ToLower(name[len("Type"):]))
		if typ == "pushresult" {
			typ = syncproto.TypePushResult
		}
		require.Regexp(t, "(?m)^### .*`"+string(typ)+"`", doc, "message %s has a section", typ)
	}
	results := between(t, doc, "## 6. Push results", "## 7.")
	for _, name := range exportedConsts(t)["Status"] {
		status := strings.ToLower(name[len("Status"):])
		require.Regexp(t, "(?m)^\\| `"+status+"` \\|", results, "status %s has a row", status)
	}
	for _, name := range exportedConsts(t)["Policy"] {
		policy := strings.ToLower(name[len("Policy"):])
		require.Contains(t, doc, "- **`"+policy+"`**", "policy %s is described", policy)
	}
}

// TestProtocolExamplesDecode decodes every example on the page: each json
// block holding a message, each transcript line (client lines as a server
// decodes them, and every line exactly as the reference encoder writes it),
// and the snapshot example.
func TestProtocolExamplesDecode(t *testing.T) {
	doc := readProtocol(t)
	blocks := regexp.MustCompile("(?s)```(json|transcript|ndjson)\n(.*?)```").FindAllStringSubmatch(doc, -1)
	counts := map[string]int{}
	for _, b := range blocks {
		kind, body := b[1], b[2]
		counts[kind]++
		switch kind {
		case "json":
			_, err := syncproto.Decode([]byte(body))
			require.NoError(t, err, "example:\n%s", body)
		case "transcript":
			for line := range strings.SplitSeq(strings.TrimSpace(body), "\n") {
				dir, frame, ok := strings.Cut(line, "> ")
				require.True(t, ok && (dir == "C" || dir == "S"), "transcript line %q", line)
				decode := syncproto.Decode
				if dir == "C" {
					decode = syncproto.DecodeRequest
				}
				msg, err := decode([]byte(frame))
				require.NoError(t, err, "frame %s", frame)
				if p, ok := msg.(*syncproto.Push); ok {
					for i := range p.Mutations {
						require.NoError(t, p.Mutations[i].Validate(), "frame %s", frame)
					}
				}
				again, err := syncproto.Encode(msg)
				require.NoError(t, err)
				require.Equal(t, frame, string(again), "transcript frames are shown as encoded")
			}
		case "ndjson":
			_, recs, err := readSnapshot([]byte(body))
			require.NoError(t, err, "snapshot example")
			require.NotEmpty(t, recs)
		}
	}
	require.GreaterOrEqual(t, counts["json"], 12, "examples for every message")
	require.GreaterOrEqual(t, counts["transcript"], 4)
	require.Equal(t, 1, counts["ndjson"])
}

// between returns the part of doc from the line starting with start up to
// the next line starting with end.
func between(t *testing.T, doc, start, end string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+start)
	require.GreaterOrEqual(t, i, 0, "section %q", start)
	rest := doc[i+1:]
	j := strings.Index(rest, "\n"+end)
	require.GreaterOrEqual(t, j, 0, "section after %q", start)
	return rest[:j]
}

// TestProtocolCloseCodeOfEachError checks that every error code row of
// section 12 that names a close code names the one CloseFor gives.
func TestProtocolCloseCodeOfEachError(t *testing.T) {
	section := between(t, readProtocol(t), "## 12. Error codes", "## 13.")
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (?:yes|no) \\| ([^|]*) \\|").FindAllStringSubmatch(section, -1)
	checked := 0
	for _, row := range rows {
		m := regexp.MustCompile(`close[sd]? (\d{4})`).FindStringSubmatch(row[2])
		if m == nil {
			continue
		}
		checked++
		require.Equal(t, m[1], fmt.Sprint(syncproto.CloseFor(syncproto.Code(row[1]))), "code %s: section 12 says %s", row[1], row[2])
	}
	require.GreaterOrEqual(t, checked, 8, "the rows that close a connection were found")
}

// TestProtocolStatesMutationCodeOrder reads section 5.3's order of the
// mutation checks and requires it of the decoder: a mutation with two
// wrong members gets the earlier one's code, in either member order.
func TestProtocolStatesMutationCodeOrder(t *testing.T) {
	section := between(t, readProtocol(t), "### 5.3 `push`", "### 5.4")
	_, list, ok := strings.Cut(strings.Join(strings.Fields(section), " "), "the first wrong one in this order decides, whatever the order of the members in the frame and whether a member is wrong by its JSON type or by its rule: ")
	require.True(t, ok, "section 5.3 states the order of the mutation checks")
	list, _, ok = strings.Cut(list, "; then the server's checks")
	require.True(t, ok)
	// What breaks each item, and the answer: code and a word of the message.
	big := `"` + strings.Repeat("x", syncproto.MaxPayloadBytes) + `"`
	deep := strings.Repeat("[", syncproto.MaxValueDepth+1) + strings.Repeat("]", syncproto.MaxValueDepth+1)
	breaks := map[string]struct {
		member, value string
		code          syncproto.Code
		word          string
	}{
		"`op_id`": {"op_id", `7`, syncproto.CodeInvalidOpID, "op_id"},
		"`model`": {"model", `"Bad"`, syncproto.CodeInvalidModel, "model"},
		"`key`":   {"key", `42`, syncproto.CodeInvalidKey, "key"},
		"`op` and `value` presence (`invalid_op`)": {"op", `"upsert"`, syncproto.CodeInvalidOp, "op"},
		"`value` size (`payload_too_large`)":       {"value", big, syncproto.CodePayloadTooLarge, "value"},
		"`value` JSON and nesting (`bad_request`)": {"value", deep, syncproto.CodeBadRequest, "nests"},
		"`hlc`":           {"hlc", `"yesterday"`, syncproto.CodeInvalidHLC, "hlc"},
		"`base_version`":  {"base_version", `"3"`, syncproto.CodeBadRequest, "base_version"},
		"`seen_version`":  {"seen_version", `-1`, syncproto.CodeBadRequest, "seen_version"},
		"`value_version`": {"value_version", `"2"`, syncproto.CodeBadRequest, "value_version"},
	}
	items := strings.Split(list, ", ")
	require.Len(t, items, len(breaks), "the order lists %q", items)
	for i := 0; i+1 < len(items); i++ {
		first, ok1 := breaks[items[i]]
		second, ok2 := breaks[items[i+1]]
		require.True(t, ok1 && ok2, "items %q, %q", items[i], items[i+1])
		if first.member == second.member {
			continue // one member, two rules: its value is checked in that order
		}
		members := map[string]string{
			"op_id": `"` + opA + `"`, "model": `"todos"`, "key": `"t/1"`, "op": `"put"`, "value": `1`,
			"hlc": `"1733140000000.0.client-a"`, "base_version": `3`, "seen_version": `2`, "value_version": `2`,
		}
		a := `"` + first.member + `":` + first.value
		b := `"` + second.member + `":` + second.value
		others := ""
		for name, v := range members {
			if name != first.member && name != second.member {
				others += `,"` + name + `":` + v
			}
		}
		for _, body := range []string{a + "," + b + others, b + "," + a + others} {
			msg, err := syncproto.DecodeRequest([]byte(`{"type":"push","id":"p","mutations":[{` + body + `}]}`))
			require.NoError(t, err)
			err = msg.(*syncproto.Push).Mutations[0].Validate()
			requireCode(t, err, first.code, "")
			require.Contains(t, err.Error(), first.word, "%s before %s", items[i], items[i+1])
		}
	}
}
