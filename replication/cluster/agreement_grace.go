package cluster

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// agreementBook is the report loop's record of the parts with a
// generation that are behind a live peer's (Options.Generations), and
// the agreement's instruments (docs/metrics.md). Only the report loop
// uses it.
type agreementBook struct {
	behind map[string]*behindSpell // by part, while behind

	rereads    *prometheus.CounterVec // result: changed|same
	refusals   prometheus.Counter
	generation *prometheus.GaugeVec   // part
	behindG    *prometheus.GaugeVec   // part
	graceEnds  *prometheus.CounterVec // part, outcome: caught_up|expired
}

// behindSpell is one stretch of surveys that found a part behind.
type behindSpell struct {
	since   time.Time
	expired bool // the grace ran out (counted once)
}

// Outcomes of a part's spell behind (syncd_cluster_config_grace_ends_total).
const (
	graceCaughtUp = "caught_up" // no longer behind within the grace
	graceExpired  = "expired"   // the grace ran out: the node refuses
)

func newAgreementBook(generations []string, reg prometheus.Registerer) *agreementBook {
	b := &agreementBook{
		behind: map[string]*behindSpell{},
		rereads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_config_rereads_total", Help: "Times this node read its shared configuration again at a survey because a live peer published other values, by result (changed: it had changed and was published at once; same).",
		}, []string{"result"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "syncd_cluster_config_refusals_total", Help: "Times this node stopped serving because its configuration differs from the cluster's (syncd_cluster_config_mismatch went to 1).",
		}),
		generation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_cluster_config_generation", Help: "The generation of a part of this node's configuration that carries one (tokens: the token file's; jwt_deny: the JWT deny list's), as of its last survey.",
		}, []string{"part"}),
		behindG: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "syncd_cluster_config_behind", Help: "1 while a live peer publishes a higher generation of the part than this node's (within the grace the node serves on; past it, it refuses), else 0.",
		}, []string{"part"}),
		graceEnds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncd_cluster_config_grace_ends_total", Help: "Spells behind a peer's generation of a part, by how they ended (caught_up within the grace; expired: the grace ran out and the node refused).",
		}, []string{"part", "outcome"}),
	}
	b.rereads.WithLabelValues("changed")
	b.rereads.WithLabelValues("same")
	for _, part := range generations {
		b.generation.WithLabelValues(part)
		b.behindG.WithLabelValues(part)
		b.graceEnds.WithLabelValues(part, graceCaughtUp)
		b.graceEnds.WithLabelValues(part, graceExpired)
	}
	if reg != nil {
		reg.MustRegister(b.rereads, b.refusals, b.generation, b.behindG, b.graceEnds)
	}
	return b
}

// track records whether part is behind (g: this node's generation and
// the newest a live peer publishes) at survey time now, and returns it
// when it has been behind for longer than the grace.
func (b *agreementBook) track(c *Cluster, part string, g generations, behind bool, now time.Time) []Behind {
	spell := b.behind[part]
	if !behind {
		if spell != nil {
			delete(b.behind, part)
			b.behindG.WithLabelValues(part).Set(0)
			if !spell.expired {
				b.graceEnds.WithLabelValues(part, graceCaughtUp).Inc()
			}
			c.log.Info("caught up with the cluster's generation", "part", part, "after", now.Sub(spell.since).Round(time.Millisecond))
		}
		return nil
	}
	grace := c.opts.GenerationGrace
	if spell == nil {
		spell = &behindSpell{since: now}
		b.behind[part] = spell
		b.behindG.WithLabelValues(part).Set(1)
		c.log.Warn("a live peer has a newer generation; serving for the grace while this node catches up",
			"part", part, "generation", g.have, "newest", g.newest, "grace", grace)
	}
	if now.Sub(spell.since) < grace {
		return nil
	}
	if !spell.expired {
		spell.expired = true
		b.graceEnds.WithLabelValues(part, graceExpired).Inc()
	}
	return []Behind{{Part: part, Have: g.have, Newest: g.newest, Grace: grace}}
}

// validateGenerations checks the agreement's options and sets the grace's
// default.
func (o *Options) validateGenerations() error {
	switch {
	case o.GenerationGrace == 0:
		o.GenerationGrace = DefaultGenerationGrace
	case o.GenerationGrace < 0 || o.GenerationGrace > MaxGenerationGrace:
		return fmt.Errorf("generation grace %s: want up to %s", o.GenerationGrace, MaxGenerationGrace)
	}
	return nil
}
