package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/server"
)

// options are syncd's command-line settings. Every flag can also be set by
// an environment variable named SYNCD_ plus the flag name in upper snake
// case (--admin-listen is SYNCD_ADMIN_LISTEN); a flag on the command line
// wins over the environment.
type options struct {
	listen          string
	data            string
	synchronous     string
	logFormat       string
	logLevel        slog.Level
	shutdownTimeout time.Duration
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("syncd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address of the sync, health and metrics listener")
	fs.StringVar(&o.data, "data", "var/syncd.db", "SQLite database file (created with its directory if missing)")
	fs.StringVar(&o.synchronous, "synchronous", "FULL", "SQLite synchronous level: FULL (acknowledged writes survive a power cut) or NORMAL (survive a crash only)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take before connections are cut")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := applyEnv(fs, getenv); err != nil {
		return o, err
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return o, fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	return o, nil
}

// applyEnv sets every flag not given on the command line from its SYNCD_*
// environment variable, when that is set.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := "SYNCD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	})
	return err
}

func newLogger(o options, w io.Writer) *slog.Logger {
	ho := &slog.HandlerOptions{Level: o.logLevel}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// run starts syncd and blocks until ctx is cancelled (SIGINT or SIGTERM),
// then shuts down gracefully within the shutdown timeout.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	o, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log := newLogger(o, stderr)

	srv, err := server.New(ctx, server.Config{
		DataPath:    o.data,
		Synchronous: server.Synchronous(strings.ToUpper(o.synchronous)),
		Logger:      log,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	log.Info("syncd listening", "addr", ln.Addr().String(), "data", o.data, "synchronous", strings.ToUpper(o.synchronous))

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("syncd shutting down", "timeout", o.shutdownTimeout)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("drain did not finish", "err", err)
	}
	if err := httpSrv.Shutdown(shutdownCtx); err != nil {
		log.Warn("listener shutdown did not finish; closing connections", "err", err)
		httpSrv.Close()
	}
	<-serveErr
	log.Info("syncd stopped")
	return nil
}
