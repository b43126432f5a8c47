package netmonitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// Probe checks reachability once. A nil error is a success; an error, a
// panic, or not returning within Config.Timeout is a failure. The monitor
// cancels ctx when the timeout passes or the monitor stops, and a probe must
// return promptly once ctx is done: the monitor declares the failure on time
// either way, but it will not start another probe, and Close will not
// return, until the running one has returned.
type Probe func(ctx context.Context) error

// ErrProbeTimeout is the failure recorded for a probe that did not return
// within Config.Timeout, or that was still running from an earlier round when
// the next probe was due. It is counted like any other failure.
var ErrProbeTimeout = errors.New("netmonitor: probe timed out")

// PanicError is the failure recorded for a probe that panicked. The monitor
// recovers the panic and keeps probing; fix the probe.
type PanicError struct {
	// Value is what the probe passed to panic.
	Value any
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("netmonitor: probe panicked: %v", e.Value)
}

// call runs p, turning a panic into *PanicError.
func (p Probe) call(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v}
		}
	}()
	return p(ctx)
}

// HTTPProbe returns a Probe that sends GET rawURL (typically a server's
// /healthz) with client and succeeds on any 2xx status. A nil client means
// http.DefaultClient. The response body is read (up to 4 KiB) and closed so
// the connection can be reused by the next probe. HTTPProbe refuses a URL
// that is not absolute http or https, so a typo fails at wiring time rather
// than reporting Offline forever.
func HTTPProbe(client *http.Client, rawURL string) (Probe, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("netmonitor: http probe url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("netmonitor: http probe url %q: want an absolute http or https URL", rawURL)
	}
	if client == nil {
		client = http.DefaultClient
	}
	target := u.String()
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return fmt.Errorf("netmonitor: http probe: %w", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("netmonitor: http probe: %w", err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("netmonitor: http probe %s: status %s", target, resp.Status)
		}
		return nil
	}, nil
}

// TCPProbe returns a Probe that succeeds when a TCP connection to addr
// ("host:port") can be opened; the connection is closed at once.
func TCPProbe(addr string) Probe {
	return func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("netmonitor: tcp probe: %w", err)
		}
		return conn.Close()
	}
}
