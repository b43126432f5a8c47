package reconnect_test

import (
	"context"
	"fmt"
	"net"

	"github.com/syncd-dev/syncd/client/netmonitor"
	"github.com/syncd-dev/syncd/client/reconnect"
)

// One run: the four steps in order, and an outcome that says the replay ran
// and completed.
func Example() {
	step := func(name string) func(context.Context) error {
		return func(context.Context) error {
			fmt.Println(name)
			return nil
		}
	}
	outcomes := make(chan reconnect.Outcome, 1)
	coord, err := reconnect.New(reconnect.Steps{
		Reconnect: step("reconnect"),
		Activate:  step("activate"),
		Bind:      step("bind"),
		Replay:    step("replay"),
	}, reconnect.Config{OnOutcome: func(o reconnect.Outcome) { outcomes <- o }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer coord.Close()

	coord.OnOnline()
	fmt.Println(<-outcomes)
	// Output:
	// reconnect
	// activate
	// bind
	// replay
	// reconnected after 1 attempt(s), last step replay, replay completed
}

// Wiring the coordinator to a network monitor: the monitor's events drive
// OnOnline and OnOffline, and a gap in the event sequence is treated as an
// unseen offline.
func Example_withMonitor() {
	server, err := net.Listen("tcp", "127.0.0.1:0") // stands in for syncd
	if err != nil {
		fmt.Println(err)
		return
	}
	defer server.Close()

	noop := func(context.Context) error { return nil }
	outcomes := make(chan reconnect.Outcome, 1)
	coord, err := reconnect.New(reconnect.Steps{
		Reconnect: noop, Activate: noop, Bind: noop, Replay: noop,
	}, reconnect.Config{OnOutcome: func(o reconnect.Outcome) { outcomes <- o }})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer coord.Close()

	mon, err := netmonitor.New(netmonitor.Config{Probe: netmonitor.TCPProbe(server.Addr().String())})
	if err != nil {
		fmt.Println(err)
		return
	}
	events, _ := mon.Subscribe()
	wired := make(chan struct{})
	go func() { // ends when the monitor closes events
		defer close(wired)
		var last uint64
		for ev := range events {
			if ev.State == netmonitor.Offline || ev.Seq > last+1 {
				coord.OnOffline()
			}
			if ev.State == netmonitor.Online {
				coord.OnOnline()
			}
			last = ev.Seq
		}
	}()
	if err := mon.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	out := <-outcomes
	fmt.Println(out.Result, out.Synced())
	mon.Close()
	<-wired
	// Output: reconnected true
}
