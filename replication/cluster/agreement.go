package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrConfigMismatch is wrapped by Ready while a part of this node's
// configuration that every node must share differs from the majority of
// the live nodes' (other model declarations, a token file of the same
// generation with other contents), or while a part that carries a
// generation has been behind a live peer's for longer than the grace (a
// token file or a deny list that missed a change the others have): the node does not
// serve until its configuration is fixed and it reports again.
// *MismatchError carries the parts.
var ErrConfigMismatch = errors.New("configuration differs from the cluster's")

// MismatchError names the parts of the configuration in which this node
// differs from the majority of the live nodes (Parts), and the parts
// whose generation has been behind a live peer's for longer than the
// grace (Behind).
type MismatchError struct {
	Parts  []string
	Behind []Behind
}

// Behind is a part that carries a generation (Options.Generations) whose
// generation on this node, Have, is below Newest, the highest a live
// peer publishes, for longer than Grace.
type Behind struct {
	Part         string
	Have, Newest uint64
	Grace        time.Duration
}

func (e *MismatchError) Error() string {
	var why []string
	if len(e.Parts) > 0 {
		why = append(why, fmt.Sprintf("%s differ from the majority of the live nodes'", strings.Join(e.Parts, ", ")))
	}
	for _, b := range e.Behind {
		why = append(why, fmt.Sprintf("%s is at generation %d, behind a live peer's %d for longer than the %s grace", b.Part, b.Have, b.Newest, b.Grace))
	}
	return fmt.Sprintf("%v: %s; this node does not serve until they agree", ErrConfigMismatch, strings.Join(why, "; "))
}

func (e *MismatchError) Is(target error) bool { return target == ErrConfigMismatch }

// The parts of the agreement the cluster adds itself: what the
// materializer's checks read, which must be the same on every node for
// them to decide alike.
const (
	// PartModels: the model declarations and the default policy.
	PartModels = "models"
	// PartClockSkew: the skew bound.
	PartClockSkew = "clock_skew"
	// PartCommandKey: a fingerprint of the command key (an HMAC of a fixed
	// text under a key derived from it: it tells nothing of the key).
	PartCommandKey = "command_key"
	// PartRecordsCheckGap: the least stream time between two records
	// checks a node digests.
	PartRecordsCheckGap = "records_check_gap"
)

// Bounds of Options.GenerationGrace.
const (
	// DefaultGenerationGrace: a few reports, enough for nodes sharing a
	// file to read it (each re-reads at once when a peer publishes other
	// values, at its next survey) and for an operator's copy of a small
	// file to every machine.
	DefaultGenerationGrace = 10 * time.Second
	// MaxGenerationGrace bounds how long a node that missed a change (a
	// revocation) may keep serving with what it has.
	MaxGenerationGrace = 5 * time.Minute
)

// GenerationPart names the part of Options.Agreement that holds the
// generation of part, one of Options.Generations: a decimal number.
func GenerationPart(part string) string { return part + "_generation" }

// agreement computes this node's parts: Options.Agreement's and the
// cluster's own.
func (c *Cluster) agreement() map[string]string {
	parts := map[string]string{}
	if c.opts.Agreement != nil {
		maps.Copy(parts, c.opts.Agreement())
	}
	var models strings.Builder
	for _, m := range slices.Sorted(maps.Keys(c.opts.Policies)) {
		fmt.Fprintf(&models, "%q=%q\n", m, c.opts.Policies[m])
	}
	fmt.Fprintf(&models, "default=%q\n", c.opts.Policies.Default())
	parts[PartModels] = HashPart([]byte(models.String()))
	parts[PartClockSkew] = c.opts.MaxClockSkew.String()
	parts[PartRecordsCheckGap] = c.opts.RecordsCheckGap.String()
	parts[PartCommandKey] = hex.EncodeToString(mac(deriveKey(c.opts.CommandKey, "syncd agreement v1"), []byte("command key fingerprint")))[:16]
	return parts
}

// HashPart is a part's value for Options.Agreement: the hex SHA-256 of
// data.
func HashPart(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// comparison is how this node's parts compare with its live peers'.
type comparison struct {
	// outvoted: the parts in which a value other than this node's is
	// shared by as many nodes or more.
	outvoted []string
	// behind: the parts with a generation in which a live peer publishes
	// a higher generation than this node's, with the highest.
	behind map[string]generations
	// differs: some live peer publishes a value other than this node's
	// in some part (a part a peer does not publish, which reading again
	// cannot change, is left out).
	differs bool
}

type generations struct{ have, newest uint64 }

// compare compares mine with peers' (each a live peer's published parts).
//
// A part is outvoted when a value other than mine is shared by as many
// nodes as mine or more (with one peer, a difference is a tie, and both
// refuse: neither can tell which is right). A peer that does not publish
// a part (a node of a release before it) counts with the part's value in
// absent when it has one there, and is not counted for it otherwise.
//
// A part listed in graded carries a generation (GenerationPart), which
// tells which of two values is newer: a peer of a higher generation makes
// the part behind, not outvoted (this node is the one to catch up); a
// peer of a lower one is not counted (it is the one to catch up); only
// peers of the same generation, and peers that publish none (a release
// before generations), are counted for the majority. The generation
// parts themselves are not compared.
func compare(mine map[string]string, peers []map[string]string, absent map[string]string, graded []string) comparison {
	cmp := comparison{behind: map[string]generations{}}
	gen := map[string]uint64{} // my generation of each graded part that has one
	genParts := map[string]bool{}
	for _, part := range graded {
		if g, err := strconv.ParseUint(mine[GenerationPart(part)], 10, 64); err == nil {
			gen[part] = g
			genParts[GenerationPart(part)] = true
		}
	}
	for _, p := range peers {
		for part, v := range mine {
			if pv, ok := p[part]; ok && pv != v {
				cmp.differs = true
			}
		}
	}
	for _, part := range slices.Sorted(maps.Keys(mine)) {
		if genParts[part] {
			continue
		}
		myGen, graded := gen[part]
		newest := myGen
		count := map[string]int{mine[part]: 1}
		for _, p := range peers {
			if graded {
				if g, err := strconv.ParseUint(p[GenerationPart(part)], 10, 64); err == nil && g != myGen {
					newest = max(newest, g)
					continue
				}
			}
			v, ok := p[part]
			if !ok {
				v, ok = absent[part]
			}
			if ok {
				count[v]++
			}
		}
		if newest > myGen {
			cmp.behind[part] = generations{have: myGen, newest: newest}
			continue
		}
		for v, n := range count {
			if v != mine[part] && n >= count[mine[part]] {
				cmp.outvoted = append(cmp.outvoted, part)
				break
			}
		}
	}
	return cmp
}

// mismatchSurveys is how many surveys in a row (one every reportEvery)
// must find this node's configuration outvoted before it stops serving.
const mismatchSurveys = 3

// surveyAgreement compares this node's parts, as of its report, with
// the live peers' statuses (nodes), and refuses to serve while they
// differ (checkAgreement). When a peer publishes other values than this
// node's, the node first reads its own configuration again and, when it
// changed, publishes it at once: nodes that share a file (a token file
// just rewritten) then agree within a survey instead of waiting for their
// next report.
func (c *Cluster) surveyAgreement(ctx context.Context, nodes []Status) {
	a := c.agreed.Load()
	if a == nil {
		return
	}
	mine := *a
	peers := c.peerAgreements(nodes)
	cmp := compare(mine, peers, c.opts.AgreementAbsent, c.opts.Generations)
	if cmp.differs {
		fresh := c.agreement()
		if maps.Equal(fresh, mine) {
			c.agr.rereads.WithLabelValues("same").Inc()
		} else {
			c.agr.rereads.WithLabelValues("changed").Inc()
			c.agreed.Store(&fresh)
			mine = fresh
			cmp = compare(mine, peers, c.opts.AgreementAbsent, c.opts.Generations)
			c.putJSON(ctx, "status."+c.opts.Node, c.Status())
		}
	}
	c.checkAgreement(mine, cmp)
}

// peerAgreements is the published parts of the live peers among nodes.
func (c *Cluster) peerAgreements(nodes []Status) []map[string]string {
	var theirs []map[string]string
	for _, st := range nodes {
		if st.Node != c.opts.Node && st.Agreement != nil && c.opts.Now().Sub(st.At) < 5*reportEvery {
			theirs = append(theirs, st.Agreement)
		}
	}
	return theirs
}

// checkAgreement acts on cmp, the comparison of mine with the live peers'
// parts: it refuses to serve (ErrConfigMismatch) once a part has been
// outvoted for mismatchSurveys surveys in a row, or a part has been
// behind for longer than Options.GenerationGrace, and serves again once
// neither holds. A part behind within its grace does not stop the node:
// it serves, its sessions stay open, and it reads its configuration again
// at every survey until it catches up.
func (c *Cluster) checkAgreement(mine map[string]string, cmp comparison) {
	now := c.opts.Now()
	var late []Behind
	for _, part := range c.opts.Generations {
		g, behind := cmp.behind[part]
		if v, err := strconv.ParseUint(mine[GenerationPart(part)], 10, 64); err == nil {
			c.agr.generation.WithLabelValues(part).Set(float64(v))
		}
		late = append(late, c.agr.track(c, part, g, behind, now)...)
	}
	// A file changed on every node at once is read by each at its own
	// report: judge only a difference that outlives a round of reports.
	outvoted := cmp.outvoted
	if len(outvoted) == 0 {
		c.seenMismatch = 0
	} else if c.seenMismatch++; c.seenMismatch < mismatchSurveys {
		outvoted = nil
	}
	if len(outvoted) == 0 && len(late) == 0 {
		if c.mismatch.Swap(nil) != nil {
			c.log.Info("this node's configuration agrees with the cluster's again")
			c.metrics.configMismatch.Set(0)
		}
		return
	}
	var err error = &MismatchError{Parts: outvoted, Behind: late}
	if prev := c.mismatch.Swap(&err); prev == nil || (*prev).Error() != err.Error() {
		c.log.Error("this node does not serve", "err", err)
		if prev == nil {
			c.agr.refusals.Inc()
		}
	}
	c.metrics.configMismatch.Set(1)
}
