package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrConfigMismatch is wrapped by Ready while a part of this node's
// configuration that every node must share differs from the majority of
// the live nodes' (a stale token file, other model declarations): the
// node does not serve until its configuration is fixed and it reports
// again. *MismatchError carries the parts.
var ErrConfigMismatch = errors.New("configuration differs from the cluster's")

// MismatchError names the parts of the configuration in which this node
// differs from the majority of the live nodes.
type MismatchError struct {
	Parts []string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v: %s differ from the majority of the live nodes'; this node does not serve until they agree", ErrConfigMismatch, strings.Join(e.Parts, ", "))
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

// disagreement returns the parts in which mine differs from the majority
// of peers' (each a live peer's published parts): a part whose value
// another group of nodes shares with as many nodes as this node's value
// or more (with one peer, a difference is a tie, and both refuse: neither
// can tell which is right). A peer that does not publish a part (a node of
// a release before it) counts with the part's value in absent when it has
// one there, and is not counted for it otherwise.
func disagreement(mine map[string]string, peers []map[string]string, absent map[string]string) []string {
	var out []string
	for _, part := range slices.Sorted(maps.Keys(mine)) {
		count := map[string]int{mine[part]: 1}
		for _, p := range peers {
			v, ok := p[part]
			if !ok {
				v, ok = absent[part]
			}
			if ok {
				count[v]++
			}
		}
		for v, n := range count {
			if v != mine[part] && n >= count[mine[part]] {
				out = append(out, part)
				break
			}
		}
	}
	return out
}

// mismatchSurveys is how many surveys in a row (one every reportEvery)
// must find this node's configuration differing before it stops serving.
const mismatchSurveys = 3

// checkAgreement publishes nothing itself: it compares this node's parts,
// as of its report, with the live peers' statuses, and refuses to serve
// while they differ (ErrConfigMismatch), serving again once they agree.
func (c *Cluster) checkAgreement(mine map[string]string, peers []Status) {
	var theirs []map[string]string
	for _, st := range peers {
		if st.Node != c.opts.Node && st.Agreement != nil && c.opts.Now().Sub(st.At) < 5*reportEvery {
			theirs = append(theirs, st.Agreement)
		}
	}
	parts := disagreement(mine, theirs, c.opts.AgreementAbsent)
	if len(parts) == 0 {
		c.seenMismatch = 0
		if c.mismatch.Swap(nil) != nil {
			c.log.Info("this node's configuration agrees with the cluster's again")
			c.metrics.configMismatch.Set(0)
		}
		return
	}
	// A file changed on every node at once is read by each at its own
	// report: judge only a difference that outlives a round of reports.
	if c.seenMismatch++; c.seenMismatch < mismatchSurveys {
		return
	}
	var err error = &MismatchError{Parts: parts}
	if prev := c.mismatch.Swap(&err); prev == nil || (*prev).Error() != err.Error() {
		c.log.Error("this node does not serve", "err", err)
	}
	c.metrics.configMismatch.Set(1)
}
