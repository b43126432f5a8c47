package reconnect

import (
	"errors"
	"fmt"
	"time"
)

// Step names one step of the sequence, in the order they run.
type Step uint8

const (
	// StepNone is the zero Step: no step had started.
	StepNone Step = iota
	// StepReconnect opens a new transport.
	StepReconnect
	// StepActivate makes it the active transport.
	StepActivate
	// StepBind runs the handshake and resumes the change feed on it.
	StepBind
	// StepReplay runs the sync worker over it.
	StepReplay
)

// String returns the step's lower-case name.
func (s Step) String() string {
	switch s {
	case StepReconnect:
		return "reconnect"
	case StepActivate:
		return "activate"
	case StepBind:
		return "bind"
	case StepReplay:
		return "replay"
	default:
		return "none"
	}
}

// Result is how a run ended.
type Result uint8

const (
	// Reconnected: reconnect, activate and bind succeeded and Replay was
	// called and returned before the run was cancelled. It always means
	// Replay ran; whether the replay completed is Outcome.ReplayErr == nil.
	Reconnected Result = iota + 1
	// GaveUp: Config.MaxAttempts attempts failed. Nothing was replayed.
	GaveUp
	// Aborted: the run's context ended (offline, or shutdown) before the run
	// could finish. Outcome.ReplayRan says whether Replay had started.
	Aborted
)

// String returns "reconnected", "gave_up" or "aborted" (the metric labels).
func (r Result) String() string {
	switch r {
	case Reconnected:
		return "reconnected"
	case GaveUp:
		return "gave_up"
	case Aborted:
		return "aborted"
	default:
		return "unknown"
	}
}

// Outcome reports one run. A run that reconnected but never replayed does
// not exist: Reconnected implies ReplayRan.
type Outcome struct {
	// Result is how the run ended.
	Result Result
	// Attempts counts the calls to Reconnect.
	Attempts int
	// Step is the last step started, StepNone if none was; for a run
	// aborted during a backoff wait, the step whose failure caused the wait.
	Step Step
	// ReplayRan reports whether Replay was called.
	ReplayRan bool
	// ReplayErr is what Replay returned: nil with ReplayRan means the replay
	// completed.
	ReplayErr error
	// Err is why the run did not reconnect: for GaveUp the last failure (a
	// *StepError); for Aborted the cancellation cause (ErrOffline,
	// ErrClosed, or the caller's context error); nil for Reconnected.
	Err error
}

// Synced reports whether the run reconnected and the replay completed: the
// queue was drained as far as the sync worker could take it.
func (o Outcome) Synced() bool {
	return o.Result == Reconnected && o.ReplayRan && o.ReplayErr == nil
}

// String summarises the outcome for logs.
func (o Outcome) String() string {
	s := fmt.Sprintf("%s after %d attempt(s), last step %s", o.Result, o.Attempts, o.Step)
	switch {
	case o.ReplayRan && o.ReplayErr == nil:
		s += ", replay completed"
	case o.ReplayRan:
		s += fmt.Sprintf(", replay failed: %v", o.ReplayErr)
	default:
		s += ", replay did not run"
	}
	if o.Err != nil {
		s += fmt.Sprintf(": %v", o.Err)
	}
	return s
}

// StepError is a step's failure, as recorded in Outcome.Err for a run that
// gave up.
type StepError struct {
	// Step is the step that failed (reconnect, activate or bind).
	Step Step
	// Attempt is the attempt it failed in, from 1.
	Attempt int
	// Err is what the step returned.
	Err error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("reconnect: %s failed on attempt %d: %v", e.Step, e.Attempt, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// actionKind is what the driver must do next.
type actionKind uint8

const (
	doStep  actionKind = iota + 1 // call action.step
	doWait                        // wait action.delay, then call waited
	doneRun                       // return action.outcome
)

// action is one instruction from the sequence to its driver.
type action struct {
	kind    actionKind
	step    Step
	delay   time.Duration
	outcome Outcome
}

// sequence is the decision core of one run: which step comes next, when to
// back off, when to give up, and what the outcome says. It performs no I/O,
// reads no clock and starts no goroutine; Coordinator.Run feeds it what the
// steps and the context did and carries out the actions it returns.
//
// The rules it encodes:
//   - Steps run reconnect, activate, bind, replay, each only after the
//     previous one succeeded.
//   - A failure of reconnect, activate or bind ends the attempt: the
//     transport of that attempt is not trusted, so the next attempt starts
//     over at reconnect after a backoff wait. After MaxAttempts failed
//     attempts (when MaxAttempts > 0) the run gives up, without a last wait.
//   - Replay runs at most once per run, and only if the context was live
//     after bind returned. Its error ends the run as Reconnected with
//     ReplayErr set: retrying a replay is the sync worker's business, and
//     reconnecting would not make a rejected mutation acceptable.
//   - Once the context has ended, no further step starts and no wait
//     continues: the run ends as Aborted. The one exception is a Replay that
//     returned nil: its work is done, so the run is Reconnected even if the
//     cancellation arrived as it returned.
type sequence struct {
	backoff     Backoff
	maxAttempts int  // 0: no limit
	next        Step // the step of the last doStep action
	out         Outcome
}

// begin returns the first action: the first attempt's reconnect.
func (s *sequence) begin() action {
	return s.start(StepReconnect)
}

// stepReturned takes what the step of the last doStep returned and whether
// the run's context had ended by then (cause non-nil), records that the step
// ran, and decides what comes next. The driver calls it only for a step it
// actually called; a step it skipped because the context had ended is
// reported through cancelled instead, and so never counts as run.
func (s *sequence) stepReturned(err, cause error) action {
	step := s.next
	s.out.Step = step
	switch step {
	case StepReconnect:
		s.out.Attempts++
	case StepReplay:
		s.out.ReplayRan = true
	}
	if step == StepReplay {
		s.out.ReplayErr = err
		if err == nil || cause == nil {
			return s.finish(Reconnected, nil)
		}
		return s.finish(Aborted, cause)
	}
	if cause != nil {
		return s.finish(Aborted, cause)
	}
	if err == nil {
		return s.start(step + 1)
	}
	failure := &StepError{Step: step, Attempt: s.out.Attempts, Err: err}
	if s.maxAttempts > 0 && s.out.Attempts >= s.maxAttempts {
		return s.finish(GaveUp, failure)
	}
	var hint time.Duration
	var h RetryHinter
	if errors.As(err, &h) {
		hint = min(h.RetryHint(), MaxRetryHint)
	}
	return action{kind: doWait, delay: s.backoff.Wait(s.out.Attempts, hint)}
}

// RetryHinter is a step error carrying the server's hint of when to try
// again (an HTTP Retry-After, an error frame's retry_after_ms). The next
// attempt waits as Backoff.Wait says for the hint, capped at MaxRetryHint:
// at least the hint, never less than half the backoff's ceiling.
type RetryHinter interface {
	error
	RetryHint() time.Duration
}

// MaxRetryHint caps a server's retry hint, so a wrong or hostile hint
// cannot keep a client away for long: the next attempt waits at most twice
// it (Backoff.Wait spreads waits above a hint over as long as the hint).
const MaxRetryHint = 5 * time.Minute

// waited is called when a backoff wait elapsed with the context live: the
// next attempt starts.
func (s *sequence) waited() action {
	return s.start(StepReconnect)
}

// cancelled is called when the driver found the context ended before
// calling a step, or during a wait.
func (s *sequence) cancelled(cause error) action {
	return s.finish(Aborted, cause)
}

func (s *sequence) start(step Step) action {
	s.next = step
	return action{kind: doStep, step: step}
}

func (s *sequence) finish(r Result, err error) action {
	s.out.Result = r
	s.out.Err = err
	return action{kind: doneRun, outcome: s.out}
}
