package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/syncd-dev/syncd/server"
)

// bootBudget is how long the boot may take before syncd gives up and
// exits non-zero (--startup-timeout): the flag, or when it is 0,
// server.DefaultStartupTimeout plus, in cluster mode, the time the quorum
// may take (--cluster-start-timeout).
func bootBudget(o options) time.Duration {
	if o.startupTimeout > 0 {
		return o.startupTimeout
	}
	d := server.DefaultStartupTimeout
	if o.cluster.enabled {
		d += o.cluster.startTimeout
	}
	return d
}

// bootFailed names the budget in err when the boot ran out of it.
func bootFailed(bootCtx context.Context, budget time.Duration, err error) error {
	if errors.Is(bootCtx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("boot took longer than its budget (--startup-timeout %s): %w", budget, err)
	}
	return err
}

// bootProbe holds the public address while syncd boots (joins its
// cluster, opens and migrates its database) and answers every request on
// it with 503 {"status":"starting"}, so a startup probe of /startupz sees
// "not yet" rather than a refused connection. close hands the address
// over to the real listener.
type bootProbe struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

func startBootProbe(addr, cert, key string) (*bootProbe, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen public: %w", err)
	}
	b := &bootProbe{addr: ln.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"starting"}` + "\n"))
		})}}
	go func() {
		defer close(b.done)
		if cert != "" {
			_ = b.srv.ServeTLS(ln, cert, key)
		} else {
			_ = b.srv.Serve(ln)
		}
	}()
	return b, nil
}

// close stops the probe and returns the address it held (the resolved
// one when --listen asked for port 0).
func (b *bootProbe) close() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		b.srv.Close()
	}
	<-b.done
	return b.addr
}
