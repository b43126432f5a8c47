package checker

import (
	"sort"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/soak/journal"
	"github.com/syncd-dev/syncd/syncproto"
)

// write is one write a client made: from a made line of its journal, or a
// rebase its conflict handler asked for (op id from the outcome it rebased).
type write struct {
	tenant     string
	opID       string
	class      journal.Class
	model, key string
	base       *uint64
	madeAt     time.Time
}

// clientJournal is one client's journal, indexed.
type clientJournal struct {
	made []write
	// handler holds the conflict handler's decision per op id.
	handler map[string]journal.Entry
	// unanswered holds the write ids of intents without a made or failed
	// line (a crash in the call); unansweredDeletes their model/key when
	// they were deletes (a delete carries no write id to the server).
	unanswered        map[string]bool
	unansweredDeletes map[string]bool
	// rebaseWrites holds the write ids of rebases the handler asked for.
	rebaseWrites map[string]bool
	failed       int
}

func readJournal(c *Client) clientJournal {
	j := clientJournal{
		handler:           map[string]journal.Entry{},
		unanswered:        map[string]bool{},
		unansweredDeletes: map[string]bool{},
		rebaseWrites:      map[string]bool{},
	}
	intents := map[string]journal.Entry{}
	for _, e := range c.Journal {
		switch e.Kind {
		case journal.KindIntent:
			intents[e.Write] = e
		case journal.KindMade:
			delete(intents, e.Write)
			j.made = append(j.made, write{tenant: c.Tenant, opID: e.OpID, class: e.Class, model: e.Model, key: e.Key, base: e.Base, madeAt: e.At})
		case journal.KindFailed:
			delete(intents, e.Write)
			j.failed++
		case journal.KindHandler:
			j.handler[e.OpID] = e
			if e.Decision == journal.DecisionRebase {
				j.rebaseWrites[e.Write] = true
			}
		}
	}
	for w, e := range intents {
		j.unanswered[w] = true
		if e.Op == "delete" {
			j.unansweredDeletes[e.Model+"/"+e.Key] = true
		}
	}
	return j
}

// accounting is invariant 1's walk over every write; invariant 3 reuses
// the writes it found, the stats come from it too.
type accounting struct {
	verdict Verdict
	stats   Stats
	writes  []write
}

// checkAccounted is invariant 1: every write made ends applied (and is in
// the oplog), superseded or conflict (decided in the ledger; a conflict went
// to the app's handler, and a rebase it asked for is itself accounted for),
// or dead-lettered with a reason (and only the poison writes may be, and
// scoped writes refused forbidden_scope);
// every oplog entry of a client comes from a write its journal made, or
// from a call a crash interrupted.
func checkAccounted(s *State, ix *index) accounting {
	b := newVerdict(Accounted)
	acc := accounting{stats: Stats{Made: map[journal.Class]int{}, Outcomes: map[string]int{}}}
	var latencies []time.Duration
	for ci := range s.Clients {
		c := &s.Clients[ci]
		j := readJournal(c)
		acc.stats.Failed += j.failed
		acc.stats.CrashWindow += len(j.unanswered)
		queued := map[string]bool{}
		for _, it := range c.Queue.Pending {
			queued[it.OpID] = true
		}
		dead := map[string]bool{}
		for _, d := range c.Queue.DeadLetters {
			dead[d.OpID] = true
		}
		seen := map[string]bool{}
		work := append([]write(nil), j.made...)
		for len(work) > 0 {
			w := work[0]
			work = work[1:]
			if seen[w.opID] {
				continue
			}
			seen[w.opID] = true
			b.check()
			acc.writes = append(acc.writes, w)
			acc.stats.Made[w.class]++
			where := c.ID + ": " + string(w.class) + " write " + w.opID + " (" + w.model + "/" + w.key + ")"
			o, ok := c.Replica.Outcomes[w.opID]
			if !ok {
				switch {
				case queued[w.opID]:
					b.fail("%s is still queued, undecided", where)
				case dead[w.opID]:
					b.fail("%s is in the dead-letter store but has no outcome", where)
				default:
					b.fail("%s is lost: no outcome, not queued, not dead-lettered (oplog entries: %d)", where, len(ix.oplogByOp[tenantOp{c.Tenant, w.opID}]))
				}
				continue
			}
			acc.stats.Outcomes[o.Status]++
			if !w.madeAt.IsZero() {
				latencies = append(latencies, o.DecidedAt.Sub(w.madeAt))
			}
			if w.class == journal.ClassPoison && o.Status != string(client.StatusDeadLettered) {
				b.fail("%s ended %s: the server must refuse it", where, o.Status)
			}
			switch client.OutcomeStatus(o.Status) {
			case client.StatusApplied:
				entries := ix.oplogByOp[tenantOp{c.Tenant, w.opID}]
				if len(entries) == 0 {
					b.fail("%s is applied at seq %d by its outcome, but the oplog has no entry for it", where, o.Seq)
				} else if entries[0].ClientID != c.ID {
					b.fail("%s was applied under client id %q", where, entries[0].ClientID)
				}
			case client.StatusSuperseded:
				b.requireDecision(s, ix, c, w, where, o.Status)
			case client.StatusConflict:
				b.requireDecision(s, ix, c, w, where, o.Status)
				h, ok := j.handler[w.opID]
				switch {
				case !ok:
					b.fail("%s ended in a conflict the app's handler never saw", where)
				case h.Decision == journal.DecisionRebase && o.RebasedAs == "":
					b.fail("%s: the handler rebased it, but its outcome names no rebased write", where)
				case h.Decision == journal.DecisionRebase:
					acc.stats.Rebased++
					work = append(work, write{tenant: c.Tenant, opID: o.RebasedAs, class: journal.ClassRebase, model: h.Model, key: h.Key, base: h.Base, madeAt: h.At})
				case o.RebasedAs != "":
					b.fail("%s: the handler dropped it, yet rebased write %s was queued", where, o.RebasedAs)
				default:
					acc.stats.Dropped++
				}
			case client.StatusDeadLettered:
				switch {
				case o.Reason == "":
					b.fail("%s was dead-lettered without a reason", where)
				case !dead[w.opID]:
					b.fail("%s is dead-lettered by its outcome but not in the dead-letter store", where)
				case w.class == journal.ClassScoped && !strings.HasPrefix(o.Reason, string(syncproto.CodeForbiddenScope)+":"):
					b.fail("%s was dead-lettered, but a scoped write may be only for forbidden_scope: %s", where, o.Reason)
				case w.class != journal.ClassPoison && w.class != journal.ClassScoped:
					b.fail("%s was dead-lettered, but only poison and scoped writes may be: %s", where, o.Reason)
				}
			default:
				b.fail("%s has an unknown outcome status %q", where, o.Status)
			}
		}
		b.checkOrigins(s, c, j, seen)
	}
	acc.stats.Latency = percentiles(latencies)
	acc.verdict = b.done()
	return acc
}

// requireDecision fails a superseded or conflict outcome the ledger does
// not hold (unless retention may have evicted it).
func (b *verdict) requireDecision(s *State, ix *index, c *Client, w write, where, status string) {
	if _, ok := ix.ledger[tenantOp{c.Tenant, w.opID}]; !ok && s.Server.LedgerFloor(c.Tenant).IsZero() {
		b.fail("%s ended %s, but the server's ledger holds no decision for it", where, status)
	}
}

// checkOrigins fails every oplog entry of client c that no accounted write
// explains: not made per the journal, not a rebase, not an interrupted call.
func (b *verdict) checkOrigins(s *State, c *Client, j clientJournal, accounted map[string]bool) {
	var entries []*OplogEntry
	for i := range s.Server.Oplog {
		e := &s.Server.Oplog[i]
		if e.ClientID == c.ID && e.Tenant == c.Tenant && !accounted[e.OpID] {
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(i, k int) bool { return entries[i].Seq < entries[k].Seq })
	for _, e := range entries {
		b.check()
		if v, ok := journal.ParseValue(e.Value); ok && (j.unanswered[v.Write] || j.rebaseWrites[v.Write]) {
			continue
		}
		if e.Op == "delete" && j.unansweredDeletes[e.Model+"/"+e.Key] {
			continue
		}
		b.fail("%s: the server applied op %s (seq %d, %s %s/%s) that no journal entry of this client made", c.ID, e.OpID, e.Seq, e.Op, e.Model, e.Key)
	}
}
