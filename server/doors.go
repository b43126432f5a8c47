package server

import (
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Timeouts of the HTTP listeners (NewHTTPServer). A websocket session is
// governed by the session's own deadlines once upgraded: the HTTP server
// clears these when it hands the connection over.
const (
	// ReadHeaderTimeout bounds reading a request's headers: a peer that
	// opens a connection and sends nothing is cut after it.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds reading a whole request.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds writing a response; the snapshot extends it per
	// write (SnapshotWriteTimeout) instead of for the whole body.
	WriteTimeout = 60 * time.Second
	// IdleTimeout closes a kept-alive HTTP connection that sends no next
	// request.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
)

// DefaultMaxConnectionsPerAddress is Config.MaxConnectionsPerAddress's
// default.
const DefaultMaxConnectionsPerAddress = 1024

// NewHTTPServer returns the http.Server syncd serves h with: every timeout
// above set, errors logged to errorLog (nil: the standard logger; pass
// Server.ErrorLog, which counts failed TLS handshakes instead of logging
// each).
func NewHTTPServer(h http.Handler, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          errorLog,
	}
}

// LimitListener wraps ln so that at most Config.MaxConnectionsPerAddress
// connections from one IP address are open at once; a connection beyond
// that is closed as soon as it is accepted and counted in
// syncd_connections_refused_per_address_total. Put syncd's public
// listener behind it; behind a load balancer every peer has the balancer's
// address, so set the limit negative (off) there and limit at the
// balancer; 0 means DefaultMaxConnectionsPerAddress.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	if s.cfg.MaxConnectionsPerAddress <= 0 {
		return ln
	}
	return &perAddressListener{Listener: ln, max: s.cfg.MaxConnectionsPerAddress, open: map[string]int{}, refused: s.metrics.refusedPerAddress}
}

type perAddressListener struct {
	net.Listener
	max     int
	refused interface{ Inc() }

	mu   sync.Mutex
	open map[string]int
}

func (l *perAddressListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		l.mu.Lock()
		ok := l.open[host] < l.max
		if ok {
			l.open[host]++
		}
		l.mu.Unlock()
		if !ok {
			l.refused.Inc()
			c.Close()
			continue
		}
		return &countedConn{Conn: c, release: func() { l.release(host) }}, nil
	}
}

func (l *perAddressListener) release(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[host]--; l.open[host] <= 0 {
		delete(l.open, host)
	}
}

func hostOf(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// countedConn releases its address's slot once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
