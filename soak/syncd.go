package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/syncd-dev/syncd/adminapi"
	"github.com/syncd-dev/syncd/internal/loopback"
	"github.com/syncd-dev/syncd/soak/checker"
)

// Bounds of the waits on syncd.
const (
	syncdReadyTimeout = 30 * time.Second
	syncdStopTimeout  = 30 * time.Second
	pollEvery         = 50 * time.Millisecond
)

// BuildSyncd builds this module's ./cmd/syncd into dir (with the race
// detector when race) and returns the binary's path. It needs the go
// command and a working directory inside the module.
func BuildSyncd(ctx context.Context, dir string, race bool) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("build syncd: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("build syncd: not inside the syncd module; pass the syncd binary instead")
	}
	bin := filepath.Join(dir, "syncd")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/syncd")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build syncd: %w\n%s", err, out)
	}
	return bin, nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, outside the ephemeral range (loopback.FreeAddr); syncd binds it on
// every (re)start.
func freeAddr() (string, error) { return loopback.FreeAddr() }

// metricSample is one scrape of /metrics: every series by its full name
// (with labels), and every metric name summed over its labels.
type metricSample map[string]float64

func (m metricSample) int(name string) int { return int(m[name]) }

// parseMetrics reads the Prometheus text format, keeping what the harness
// needs: sample lines, not types or help.
func parseMetrics(r io.Reader) (metricSample, error) {
	out := metricSample{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] = v
		if j := strings.IndexByte(series, '{'); j > 0 {
			out[series[:j]] += v
		}
	}
	return out, sc.Err()
}

// syncdProc runs syncd as a child process, on the same database and ports
// across restarts. It is used by one goroutine at a time (the run's
// scheduler, then its quiescence), except scrape and status, which only
// talk HTTP.
type syncdProc struct {
	name       string // "syncd", or the node's id in a cluster
	bin        string
	args       []string
	addr       string // public listener
	adminAddr  string
	natsAddr   string // a cluster node's embedded NATS client listener
	adminToken string
	logPath    string
	dbPath     string
	http       *http.Client
	// readyTimeout bounds a start (longer for a cluster node, which waits
	// for its quorum and catches up).
	readyTimeout time.Duration
	// natsPassword is a cluster node's NATS node-user password (its
	// cluster secret's), for reading the command stream's head.
	natsPassword string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	gen     int

	// carried sums the counters of generations that ended; last is the
	// newest scrape of the running one.
	carried metricSample
	last    metricSample
	// unexpected records exits the harness did not cause.
	unexpected []string
}

// newSyncd configures a syncd process; extra are appended to its flags (a
// cluster node's).
func newSyncd(bin, dbPath, tokens, addr, adminAddr, adminToken, logPath string, maxSkew time.Duration, extra ...string) *syncdProc {
	args := []string{"--data", dbPath, "--tokens", tokens, "--listen", addr, "--admin-listen", adminAddr,
		"--max-clock-skew", maxSkew.String(), "--shutdown-timeout", "10s"}
	for model, policy := range policies {
		args = append(args, "--model", model+"="+policy)
	}
	args = append(args, extra...)
	return &syncdProc{
		name: "syncd", readyTimeout: syncdReadyTimeout,
		bin: bin, args: args, addr: addr, adminAddr: adminAddr, adminToken: adminToken, logPath: logPath, dbPath: dbPath,
		http:    &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		carried: metricSample{},
	}
}

// running reports whether a generation is alive. A generation that ended
// on its own reads as not running until exitedOnItsOwn records it.
func (s *syncdProc) running() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// launch starts a new generation without waiting for it: the nodes of a
// cluster start together, each waiting for the others' quorum.
func (s *syncdProc) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.gen++
	fmt.Fprintf(logf, "=== soak: syncd generation %d at %s\n", s.gen, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start syncd: %w", err)
	}
	s.cmd, s.done, s.last = cmd, make(chan struct{}), nil
	done := s.done
	go func() {
		s.waitErr = cmd.Wait()
		logf.Close()
		close(done)
	}()
	return nil
}

// waitReady waits, within readyTimeout, until the launched generation
// answers /readyz.
func (s *syncdProc) waitReady(ctx context.Context) error {
	done := s.done
	deadline := time.Now().Add(s.readyTimeout)
	var why string // the last /readyz answer
	for {
		var ok bool
		if ok, why = s.ready(ctx); ok {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s generation %d exited before it was ready: %v (see %s)", s.name, s.gen, s.waitErr, s.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s generation %d not ready within %v: /readyz: %s (see %s, which ends:\n%s)", s.name, s.gen, s.readyTimeout, why, s.logPath, logTail(s.logPath, 4000))
		}
	}
}

// ready reports whether the generation answers /readyz with 200, and
// what it answered.
func (s *syncdProc) ready(ctx context.Context) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false, err.Error()
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
}

// logTail is the end of the log at path, at most n bytes.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return string(b)
}

// scrape reads /metrics and remembers it as the running generation's
// latest counters.
func (s *syncdProc) scrape(ctx context.Context) (metricSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape syncd: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape syncd: %s", resp.Status)
	}
	m, err := parseMetrics(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape syncd: %w", err)
	}
	s.last = m
	return m, nil
}

// sample reads syncd's goroutines and open files from /metrics, and
// counts which open files are its database's (where /proc tells); it also
// returns what every descriptor points at, for the event log.
func (s *syncdProc) sample(ctx context.Context) (checker.Sample, []string, error) {
	m, err := s.scrape(ctx)
	if err != nil {
		return checker.Sample{}, nil, err
	}
	sample := checker.Sample{Goroutines: m.int("go_goroutines"), FDs: m.int("process_open_fds")}
	files := openFiles(s.cmd.Process.Pid)
	abs, err := filepath.Abs(s.dbPath)
	if err != nil {
		return checker.Sample{}, nil, err
	}
	for _, f := range files {
		if strings.HasPrefix(f, abs) {
			sample.DatabaseFDs++
		}
	}
	return sample, files, nil
}

// status reads the admin API's /v1/admin/status.
func (s *syncdProc) status(ctx context.Context) (adminapi.Status, error) {
	var st adminapi.Status
	err := s.adminGet(ctx, "http://"+s.adminAddr+adminapi.PathStatus, &st)
	return st, err
}

// adminGet GETs an admin API URL with the admin token and decodes the JSON
// answer into v.
func (s *syncdProc) adminGet(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.adminToken)
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("syncd admin: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("syncd admin: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("syncd admin: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, v)
}

// counter is a counter summed over every generation so far: the ended ones
// as last scraped, plus the running one.
func (s *syncdProc) counter(name string) float64 {
	return s.carried[name] + s.last[name]
}

// ended folds the ended generation's last scrape into carried.
func (s *syncdProc) ended() {
	for k, v := range s.last {
		if strings.HasSuffix(strings.SplitN(k, "{", 2)[0], "_total") {
			s.carried[k] += v
		}
	}
	s.last = nil
}

// kill scrapes the counters one last time, then SIGKILLs the generation.
// Counts that grew between that scrape and the kill are lost, so the
// carried counters are lower bounds.
func (s *syncdProc) kill(ctx context.Context) error {
	if !s.running() {
		return s.exitedOnItsOwn()
	}
	s.scrape(ctx) // best effort: a failed scrape keeps the previous one
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill syncd: %w", err)
	}
	return s.wait(syncdStopTimeout)
}

// terminate asks the generation to drain and stop (SIGTERM) and waits;
// past the timeout it is killed. A non-zero exit is reported as an error.
func (s *syncdProc) terminate(ctx context.Context) error {
	if !s.running() {
		return s.exitedOnItsOwn()
	}
	s.scrape(ctx)
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop syncd: %w", err)
	}
	if err := s.wait(syncdStopTimeout); err != nil {
		s.cmd.Process.Kill()
		<-s.done
		s.ended()
		s.done = nil
		return fmt.Errorf("syncd did not stop on SIGTERM within %v; killed", syncdStopTimeout)
	}
	if s.waitErr != nil {
		return fmt.Errorf("syncd exited with %v after SIGTERM (see %s)", s.waitErr, s.logPath)
	}
	return nil
}

func (s *syncdProc) wait(limit time.Duration) error {
	select {
	case <-s.done:
		s.ended()
		s.done = nil
		return nil
	case <-time.After(limit):
		return fmt.Errorf("syncd generation %d still running %v after the signal", s.gen, limit)
	}
}

// exitedOnItsOwn records an exit the harness did not cause, if the
// generation ended that way; nil if no generation was started or the last
// one was stopped by the harness.
func (s *syncdProc) exitedOnItsOwn() error {
	if s.done == nil || s.running() {
		return nil
	}
	msg := fmt.Sprintf("%s generation %d exited on its own: %v (see %s)", s.name, s.gen, s.waitErr, s.logPath)
	s.unexpected = append(s.unexpected, msg)
	s.ended()
	s.done = nil
	return errors.New(msg)
}

// caughtUp reports whether no oplog entry after cursor is visible to a
// client of tenant that may read models. A client's cursor advances with
// the entries it is sent, so it can stay below the head when the newest
// entries belong to models it may not read.
func (s *syncdProc) caughtUp(ctx context.Context, tenant string, models []string, cursor uint64) (bool, error) {
	const pageLimit, maxPages = 1000, 100
	for _, model := range models {
		from := cursor
		for range maxPages {
			var page adminapi.OplogPage
			url := fmt.Sprintf("http://%s/v1/admin/oplog?from=%d&limit=%d&tenant=%s&model=%s", s.adminAddr, from, pageLimit, tenant, model)
			if err := s.adminGet(ctx, url, &page); err != nil {
				return false, err
			}
			if len(page.Entries) > 0 {
				return false, nil
			}
			if page.Next >= page.Head || page.Next <= from {
				break
			}
			from = page.Next
		}
	}
	return true, nil
}
