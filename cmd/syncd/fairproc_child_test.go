package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/client/offlinequeue"
	"github.com/syncd-dev/syncd/syncdtest"
	"github.com/syncd-dev/syncd/syncproto"
)

// The fairness scenario's load runs in child processes of the test
// binary, as devices are other machines: the test binary started with
// fairChildArg and the path of a fairSpec as its arguments runs the role
// the spec names instead of the tests (fairChildMain, called first thing
// in TestMain), writes a fairReport to the spec's Out and exits.
const fairChildArg = "syncd-fairness-child"

// The roles of a fairness child.
const (
	// fairFlood is tenant A: one websocket session per device of the
	// spec, each pushing Pushes pushes of PushSize mutations in closed
	// loop (the next once the last was answered, every write applied),
	// until they are done or the child is sent SIGTERM; a push being
	// answered then is waited for, so every push sent is counted.
	fairFlood = "flood"
	// fairDeviceRole is tenant B's one device (Device says which form:
	// the client library by default) doing Writes sequential awaited
	// writes.
	fairDeviceRole = "device"
)

// fairStepTimeout bounds one network step of a child (a dial, a push's
// write or its answer): a server that stops answering fails the child,
// it never hangs it.
const fairStepTimeout = time.Minute

// fairSpec tells a fairness child what to do; the parent writes it as
// JSON.
type fairSpec struct {
	Role     string
	URL      string       // syncd's public listener, http://127.0.0.1:port
	Devices  []fairDevice // the sessions: every flood device, or the one device
	Pushes   int          // fairFlood: pushes per session at most
	PushSize int          // fairFlood: mutations per push
	Writes   int          // fairDeviceRole: awaited writes
	Device   string       // fairDeviceRole: the device's form (fairDeviceClient, the default, ...)
	Dir      string       // the child's directory (the device's queue lives there)
	Ready    string       // created once the load runs (every session open)
	Out      string       // where the fairReport goes
	Limit    time.Duration
}

// fairDevice is one device's credential.
type fairDevice struct {
	ClientID string
	Token    string
}

// fairReport is what a fairness child measured.
type fairReport struct {
	// Acks are the wall-clock times (Unix nanoseconds) at which each of
	// the flood's pushes was answered with every write applied.
	Acks []int64
	// Lat is each of the device's writes from its Put to its applied
	// outcome; From and To (Unix nanoseconds) the first write's start and
	// the last one's end.
	Lat      []time.Duration
	From, To int64
	// CPU is the child's CPU time (user and system, every thread) over
	// its role, which took Took: what the load generator took from the
	// cores syncd runs on.
	CPU, Took time.Duration
	// Err is why the child failed; "" when it did its part.
	Err string
}

// fairChildMain runs a fairness child when args (os.Args) ask for one and
// returns its exit code; ok is false for any other run of the binary.
func fairChildMain(args []string) (code int, ok bool) {
	if len(args) != 3 || args[1] != fairChildArg {
		return 0, false
	}
	var spec fairSpec
	rep := fairReport{}
	b, err := os.ReadFile(args[2])
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err == nil {
		start := time.Now()
		rep, err = runFairChild(spec)
		rep.Took = time.Since(start)
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
			rep.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err != nil {
		rep.Err = err.Error()
		code = 1
	}
	out, err := json.Marshal(rep)
	if err == nil && spec.Out != "" {
		err = os.WriteFile(spec.Out, out, 0o600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fairness child:", err)
		code = 1
	}
	return code, true
}

// runFairChild runs spec's role within spec.Limit, stopped early by
// SIGTERM. SIGTERM stays caught until the process exits: a stop that
// arrives once the role is done must not kill the child before it wrote
// its report.
func runFairChild(spec fairSpec) (fairReport, error) {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), spec.Limit)
	defer cancel()
	go func() { // ends when the role does (cancel) or at the stop
		select {
		case <-term:
			cancel()
		case <-ctx.Done():
		}
	}()
	switch spec.Role {
	case fairFlood:
		return runFairFlood(ctx, spec)
	case fairDeviceRole:
		return runFairDevice(ctx, spec)
	}
	return fairReport{}, fmt.Errorf("unknown fairness role %q", spec.Role)
}

// runFairFlood is the fairFlood role. It returns an error when a session
// fails or a write is not applied; a stop (SIGTERM, the limit) is no
// error.
func runFairFlood(ctx context.Context, spec fairSpec) (fairReport, error) {
	node := &procNode{url: spec.URL}
	var conns []*pushConn
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for _, d := range spec.Devices {
		dctx, cancel := context.WithTimeout(ctx, fairStepTimeout)
		c, err := dialPush(dctx, node, d.Token, d.ClientID, syncproto.NewClock(d.ClientID, nil))
		cancel()
		if err != nil {
			return fairReport{}, fmt.Errorf("%s: open a session: %w", d.ClientID, err)
		}
		conns = append(conns, c)
	}
	if err := os.WriteFile(spec.Ready, nil, 0o600); err != nil {
		return fairReport{}, err
	}
	var (
		mu   sync.Mutex
		rep  fairReport
		errs []error
		wg   sync.WaitGroup
	)
	for i, c := range conns {
		wg.Add(1)
		go func() { // owned by this role: it waits for every loop
			defer wg.Done()
			id := spec.Devices[i].ClientID
			clock := syncproto.NewClock(id, nil)
			for p := 0; p < spec.Pushes && ctx.Err() == nil; p++ {
				err := fairPush(c, clock, id, p, spec.PushSize)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
				} else {
					rep.Acks = append(rep.Acks, time.Now().UnixNano())
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return rep, errors.Join(errs...)
}

// fairPush sends push p of n mutations on c and reads its answer, each
// step bounded by fairStepTimeout (not by the role's context: a push sent
// is always waited for), and returns nil when every write was applied.
func fairPush(c *pushConn, clock *syncproto.Clock, clientID string, p, n int) error {
	id, frame, err := syncdtest.LoadPush(clock, clientID, p, n)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), fairStepTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, frame); err != nil {
		return fmt.Errorf("push %s: %w", id, err)
	}
	_, answer, err := c.conn.Read(ctx)
	if err != nil {
		return fmt.Errorf("answer to %s: %w", id, err)
	}
	return syncdtest.LoadPushApplied(answer, id, n)
}

// runFairDevice is the fairDeviceRole: it opens the device of spec.Device
// (outside the measured writes, as a device that has been online a
// while), then writes Writes new keys of model notes (k<i> through the
// client library), each awaited to its outcome, which must be applied.
func runFairDevice(ctx context.Context, spec fairSpec) (fairReport, error) {
	if len(spec.Devices) != 1 {
		return fairReport{}, fmt.Errorf("the device role takes one device, got %d", len(spec.Devices))
	}
	write, closeDevice, err := openFairDevice(ctx, spec)
	if err != nil {
		return fairReport{}, err
	}
	defer closeDevice()
	rep := fairReport{Lat: make([]time.Duration, spec.Writes), From: time.Now().UnixNano()}
	for i := range spec.Writes {
		start := time.Now()
		if err := write(i); err != nil {
			return rep, fmt.Errorf("write %d: %w", i, err)
		}
		rep.Lat[i] = time.Since(start)
	}
	rep.To = time.Now().UnixNano()
	return rep, nil
}

// The forms of tenant B's device (fairSpec.Device).
const (
	// fairDeviceClient is the client library over its SQLite queue at the
	// queue's default (synchronous=FULL): Put, then Await.
	fairDeviceClient = "client"
	// fairDeviceClientNormal is the same at synchronous=NORMAL: the
	// device's own writes do not sync the disk syncd syncs.
	fairDeviceClientNormal = "client-normal"
	// fairDeviceRaw is one websocket session pushing one mutation at a
	// time and reading its answer, as server.BenchmarkFairness's device.
	fairDeviceRaw = "raw"
)

// openFairDevice opens spec's device (its one credential, spec.Device's
// form) and returns its write of key k<i>, which returns once the write is
// applied, and its close.
func openFairDevice(ctx context.Context, spec fairSpec) (write func(i int) error, closeDevice func(), err error) {
	d := spec.Devices[0]
	switch spec.Device {
	case fairDeviceRaw:
		dctx, cancel := context.WithTimeout(ctx, fairStepTimeout)
		defer cancel()
		clock := syncproto.NewClock(d.ClientID, nil)
		c, err := dialPush(dctx, &procNode{url: spec.URL}, d.Token, d.ClientID, clock)
		if err != nil {
			return nil, nil, err
		}
		return func(i int) error { return fairPush(c, clock, d.ClientID, i, 1) }, c.close, nil
	case fairDeviceClient, fairDeviceClientNormal:
	default:
		return nil, nil, fmt.Errorf("unknown device form %q", spec.Device)
	}
	opts := offlinequeue.SQLiteOptions{}
	if spec.Device == fairDeviceClientNormal {
		opts.Synchronous = offlinequeue.SyncNormal
	}
	q, err := offlinequeue.OpenSQLite(filepath.Join(spec.Dir, "queue.db"), opts)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.Open(ctx, client.Config{ServerURLs: []string{spec.URL}, Token: d.Token, ClientID: d.ClientID, Queue: q})
	if err != nil {
		return nil, nil, err
	}
	for {
		st, err := c.Status(ctx)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		if st.Connected {
			break
		}
		select {
		case <-ctx.Done():
			c.Close()
			return nil, nil, fmt.Errorf("not connected: %w (last error: %v)", ctx.Err(), st.LastError)
		case <-time.After(10 * time.Millisecond):
		}
	}
	write = func(i int) error {
		op, err := c.Put(ctx, "notes", fmt.Sprintf("k%d", i), json.RawMessage(`{"n":1}`))
		if err != nil {
			return err
		}
		o, err := c.Await(ctx, op)
		if err != nil {
			return err
		}
		if o.Status != client.StatusApplied {
			return fmt.Errorf("%s, not applied", o.Status)
		}
		return nil
	}
	return write, func() { c.Close() }, nil
}
