package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunTabulatesCustomMetrics(t *testing.T) {
	in := `goos: linux
pkg: github.com/syncd-dev/syncd/client/offlinequeue
BenchmarkEnqueue/file/producers=1-2     1000   1200000 ns/op   833.0 ops/s   900.0 ceiling_ops/s   0.93 ratio   512 B/op   9 allocs/op
BenchmarkEnqueue/file/producers=16-2    9000    120000 ns/op   8333 ops/s   10.0 x_single
PASS
`
	var out bytes.Buffer
	require.NoError(t, run(strings.NewReader(in), &out))
	want := `| package | benchmark | ns/op | ops/s | ceiling_ops/s | ratio | x_single |
|---|---|---:|---:|---:|---:|---:|
| client/offlinequeue | BenchmarkEnqueue/file/producers=1 | 1200000 | 833.0 | 900.0 | 0.93 |  |
| client/offlinequeue | BenchmarkEnqueue/file/producers=16 | 120000 | 8333 |  |  | 10.0 |
`
	require.Equal(t, want, out.String())
}

func TestRunRejectsEmptyInput(t *testing.T) {
	require.Error(t, run(strings.NewReader("PASS\n"), &bytes.Buffer{}))
}
