package replication_test

import (
	"flag"
	"io"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	r "github.com/syncd-dev/syncd/replication"
	"github.com/syncd-dev/syncd/syncproto"
)

func TestParsePolicy(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want syncproto.Policy
		ok   bool
	}{
		{"lww", syncproto.PolicyLWW, true},
		{"optimistic", syncproto.PolicyOptimistic, true},
		{"hook", syncproto.PolicyHook, true},
		{"", "", false},
		{"LWW", "", false},
		{" lww", "", false},
		{"crdt", "", false},
	} {
		got, err := r.ParsePolicy(tt.in)
		if !tt.ok {
			require.ErrorIs(t, err, r.ErrUnknownPolicy, "%q", tt.in)
			continue
		}
		require.NoError(t, err, "%q", tt.in)
		require.Equal(t, tt.want, got)
	}
}

// TestConfigFlag fills a Config from repeated --model flags, as syncd does.
func TestConfigFlag(t *testing.T) {
	var cfg r.Config
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(&cfg, "model", "NAME=POLICY")
	require.NoError(t, fs.Parse([]string{"--model", "notes=optimistic", "--model", "drafts=hook"}))

	require.Equal(t, syncproto.PolicyOptimistic, cfg.For("notes"))
	require.Equal(t, syncproto.PolicyHook, cfg.For("drafts"))
	require.Equal(t, r.DefaultPolicy, cfg.For("todos"))
	require.Equal(t, "drafts=hook,notes=optimistic", cfg.String())
	require.True(t, cfg.Uses(syncproto.PolicyHook))
	require.False(t, cfg.Uses(syncproto.PolicyLWW))

	for _, bad := range []string{"notes=lww", "notes", "=lww", "Notes=lww", "todos=", "todos=crdt", "to dos=lww"} {
		require.Error(t, fs.Parse([]string{"--model", bad}), "%q", bad)
	}
	require.Equal(t, syncproto.PolicyOptimistic, cfg.For("notes"), "a refused declaration changed the config")
}

func TestZeroConfig(t *testing.T) {
	var cfg r.Config
	require.Equal(t, syncproto.PolicyLWW, cfg.For("anything"))
	require.False(t, cfg.Uses(syncproto.PolicyHook))
	require.Equal(t, "", cfg.String())
}

func TestCheckSkew(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	const maxAhead = time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	at := func(d time.Duration) syncproto.Timestamp { return ts(now.Add(d).UnixMilli(), 0, "c") }
	for _, tt := range []struct {
		name     string
		ts       syncproto.Timestamp
		maxAhead time.Duration
		ahead    time.Duration // 0: accepted
	}{
		{"behind by a year", at(-365 * 24 * time.Hour), 0, 0},
		{"now", at(0), 0, 0},
		{"exactly at the default bound", at(r.DefaultMaxClockSkew), 0, 0},
		{"past the default bound", at(r.DefaultMaxClockSkew + time.Millisecond), 0, r.DefaultMaxClockSkew + time.Millisecond},
		{"negative bound means default", at(30 * time.Second), -1, 0},
		{"custom bound", at(2 * time.Second), time.Second, 2 * time.Second},
		{"a century ahead", at(100 * 365 * 24 * time.Hour), 0, 100 * 365 * 24 * time.Hour},
		{"beyond a Duration saturates", ts(syncproto.MaxWall, 0, "c"), 0, maxAhead},
		{"unvalidated huge wall does not overflow", ts(1<<62, 0, "c"), 0, maxAhead},
		{"unvalidated negative wall is behind", ts(-1<<62, 0, "c"), 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := r.CheckSkew(tt.ts, now, tt.maxAhead)
			if tt.ahead == 0 {
				require.NoError(t, err)
				return
			}
			var skew *r.SkewError
			require.ErrorAs(t, err, &skew)
			bound := tt.maxAhead
			if bound <= 0 {
				bound = r.DefaultMaxClockSkew
			}
			require.Equal(t, &r.SkewError{Ahead: tt.ahead, Bound: bound}, skew)
		})
	}
}

func TestDefaultPolicyForUndeclaredModels(t *testing.T) {
	var cfg r.Config
	require.NoError(t, cfg.Set("notes=lww"))
	require.NoError(t, cfg.Set(r.AnyModel+"=none"))
	require.Equal(t, syncproto.PolicyNone, cfg.Default())
	require.Equal(t, syncproto.PolicyNone, cfg.For("todos"))
	require.Equal(t, syncproto.PolicyLWW, cfg.For("notes"))
	require.True(t, cfg.Declared("notes"))
	require.False(t, cfg.Declared(r.AnyModel))
	require.Error(t, cfg.Set("todos=none"), "none is only a default")
	require.Error(t, cfg.Set(r.AnyModel+"=optimistic"), "the default is declared once")

	author := r.Author{Tenant: "acme", ClientID: "phone", CanWrite: func(string) bool { return true }}
	clock := syncproto.NewClock("phone", nil)
	mut := func(model string) syncproto.Mutation {
		id, err := syncproto.NewOpID()
		require.NoError(t, err)
		return syncproto.Mutation{OpID: id, Model: model, Key: "k", Op: syncproto.OpPut, Value: []byte(`1`), HLC: clock.Now()}
	}
	b := r.Admit(author, []syncproto.Mutation{mut("notes"), mut("todos")}, cfg, time.Now(), time.Minute)
	require.Nil(t, b.Writes[0].Refusal)
	require.NotNil(t, b.Writes[1].Refusal)
	require.Equal(t, syncproto.CodeInvalidModel, b.Writes[1].Refusal.Code)
}
