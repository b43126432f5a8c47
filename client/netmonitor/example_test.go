package netmonitor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/syncd-dev/syncd/client/netmonitor"
)

// A monitor decides at its first probe, so the app learns its starting
// state without waiting for an interval or a threshold.
func Example() {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer server.Close()

	probe, err := netmonitor.HTTPProbe(server.Client(), server.URL+"/healthz")
	if err != nil {
		fmt.Println(err)
		return
	}
	mon, err := netmonitor.New(netmonitor.Config{Probe: probe})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mon.Close()

	events, unsubscribe := mon.Subscribe()
	defer unsubscribe()
	if err := mon.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	ev := <-events
	fmt.Println(ev.State, ev.Seq)
	// Output: online 1
}
