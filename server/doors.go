package server

import (
	"cmp"
	"net"
	"net/http"
	"sync"
	"time"
)

// Timeouts of the HTTP listeners (Server.HTTPServer): the defaults of
// HTTPTimeouts. A websocket session is governed by the session's own
// deadlines once upgraded: the HTTP server clears these when it hands the
// connection over.
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

// HTTPTimeouts are the timeouts of syncd's HTTP listeners
// (Config.HTTPTimeouts). A zero field takes the constant of the same name
// above (ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout); New
// refuses a negative one.
type HTTPTimeouts struct {
	ReadHeader time.Duration
	Read       time.Duration
	Write      time.Duration
	Idle       time.Duration
}

// withDefaults fills zero fields from the constants.
func (t HTTPTimeouts) withDefaults() HTTPTimeouts {
	t.ReadHeader = cmp.Or(t.ReadHeader, ReadHeaderTimeout)
	t.Read = cmp.Or(t.Read, ReadTimeout)
	t.Write = cmp.Or(t.Write, WriteTimeout)
	t.Idle = cmp.Or(t.Idle, IdleTimeout)
	return t
}

func (t HTTPTimeouts) valid() bool {
	return t.ReadHeader >= 0 && t.Read >= 0 && t.Write >= 0 && t.Idle >= 0
}

// DefaultMaxConnectionsPerAddress is Config.MaxConnectionsPerAddress's
// default.
const DefaultMaxConnectionsPerAddress = 1024

// HTTPServer returns the http.Server syncd serves h with (its public or
// admin handler): every timeout of Config.HTTPTimeouts set, headers
// bounded by MaxHeaderBytes, errors logged through ErrorLog.
func (s *Server) HTTPServer(h http.Handler) *http.Server {
	t := s.cfg.HTTPTimeouts
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.ReadHeader,
		ReadTimeout:       t.Read,
		WriteTimeout:      t.Write,
		IdleTimeout:       t.Idle,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          s.ErrorLog(),
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
