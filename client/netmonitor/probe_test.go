package netmonitor_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncd-dev/syncd/client/netmonitor"
)

func TestHTTPProbe(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/draining", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "draining", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()

	healthy, err := netmonitor.HTTPProbe(srv.Client(), srv.URL+"/healthz")
	require.NoError(t, err)
	require.NoError(t, healthy(ctx))

	draining, err := netmonitor.HTTPProbe(srv.Client(), srv.URL+"/draining")
	require.NoError(t, err)
	require.ErrorContains(t, draining(ctx), "503")

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, healthy(cancelled), context.Canceled)

	srv.Close()
	require.Error(t, healthy(ctx), "server gone")
}

func TestHTTPProbeRefusesBadURLs(t *testing.T) {
	for _, raw := range []string{"", "/healthz", "127.0.0.1:8080/healthz", "ftp://host/healthz", "http://", "http://h/%zz"} {
		_, err := netmonitor.HTTPProbe(nil, raw)
		require.Error(t, err, "%q", raw)
	}
}

func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
	})
	probe := netmonitor.TCPProbe(ln.Addr().String())
	require.NoError(t, probe(context.Background()))

	require.NoError(t, ln.Close())
	require.Error(t, probe(context.Background()), "nothing listens any more")
}
