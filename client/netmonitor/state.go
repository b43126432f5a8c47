package netmonitor

import "time"

// State is the monitor's verdict on reachability.
type State uint8

const (
	// Unknown is the state before the first probe has answered. A started
	// monitor leaves it after one probe and never returns to it.
	Unknown State = iota
	// Online means the last decision was that the probe target is reachable.
	Online
	// Offline means the last decision was that the probe target is not
	// reachable.
	Offline
)

// String returns "unknown", "online" or "offline".
func (s State) String() string {
	switch s {
	case Online:
		return "online"
	case Offline:
		return "offline"
	default:
		return "unknown"
	}
}

// Event is one state decision as delivered to subscribers.
type Event struct {
	// State is the new state: Online or Offline, never Unknown.
	State State
	// Seq numbers the decisions of one monitor: the decision made by the
	// first probe is 1 and every transition adds one. A subscriber that
	// receives Seq n after n-2 or earlier knows that transitions were
	// coalesced while it was not reading (for example that an Offline came
	// and went between two Online events), and should treat the connection
	// it holds as broken.
	Seq uint64
	// Err is the last failed probe's error when State is Offline; nil when
	// Online.
	Err error
}

// detector is the monitor's decision core: it turns a sequence of probe
// results into state decisions, with no clock, goroutine or I/O. The loop
// in monitor.go feeds it and acts on what it returns.
type detector struct {
	failureThreshold int
	successThreshold int

	state  State
	streak int // consecutive results that contradict state
	seq    uint64
}

// observe records one probe result (err == nil is a success) and reports
// whether it changed the state. The first result decides the state
// directly; after that, FailureThreshold consecutive failures leave Online
// and SuccessThreshold consecutive successes leave Offline, and a result
// that agrees with the state resets the count.
func (d *detector) observe(err error) (Event, bool) {
	ok := err == nil
	switch {
	case d.state == Unknown:
		d.decide(ok)
	case ok == (d.state == Online):
		d.streak = 0
		return Event{}, false
	default:
		d.streak++
		threshold := d.failureThreshold
		if d.state == Offline {
			threshold = d.successThreshold
		}
		if d.streak < threshold {
			return Event{}, false
		}
		d.decide(ok)
	}
	ev := Event{State: d.state, Seq: d.seq}
	if !ok {
		ev.Err = err
	}
	return ev, true
}

func (d *detector) decide(ok bool) {
	d.state = Offline
	if ok {
		d.state = Online
	}
	d.streak = 0
	d.seq++
}

// next returns how long to wait before the next probe: offline() while
// Offline, so a return is noticed soon; confirm while a run of
// contradicting results is building towards a threshold, so a threshold of
// N costs (N-1) confirm intervals rather than (N-1) full intervals;
// interval otherwise.
func (d *detector) next(interval, confirm time.Duration, offline func() time.Duration) time.Duration {
	switch {
	case d.state == Offline:
		return offline()
	case d.streak > 0:
		return confirm
	}
	return interval
}
