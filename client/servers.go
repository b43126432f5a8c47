package client

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/syncd-dev/syncd/syncproto"
)

// servers is the client's list of syncd base URLs: the ones it was
// configured with (Config.ServerURLs), then the ones the servers announced
// (welcome.servers) that it may use, kept in the replica so that a device
// configured with one node's URL still fails over after a restart.
type servers struct {
	configured []string
	secure     bool // a configured URL uses TLS: learnt ones must too

	mu      sync.Mutex
	learned []string
}

func newServers(configured []string) *servers {
	s := &servers{configured: configured}
	for _, u := range configured {
		s.secure = s.secure || syncproto.SecureServerURL(u)
	}
	return s
}

// all returns the configured URLs, then the learnt ones.
func (s *servers) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clip(s.configured), s.learned...)
}

// learn keeps the announced URLs the client may use: valid, not
// configured already, and never a plaintext one when a configured URL
// uses TLS (a server, or anyone on a plaintext path, must not steer the
// device's token to a weaker link). It reports whether the list changed.
func (s *servers) learn(announced []string) bool {
	var keep []string
	for _, u := range announced {
		switch {
		case syncproto.ValidateServerURL(u) != nil,
			s.secure && !syncproto.SecureServerURL(u),
			slices.Contains(s.configured, u),
			slices.Contains(keep, u):
			continue
		}
		keep = append(keep, u)
	}
	if len(keep) > syncproto.MaxServers {
		keep = keep[:syncproto.MaxServers]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(keep, s.learned) {
		return false
	}
	s.learned = keep
	return true
}

// loadServers restores the URLs learnt before a restart.
func (c *Client) loadServers(ctx context.Context) error {
	v, err := c.replica.text(ctx, metaServers)
	if err != nil || v == "" {
		return err
	}
	var learned []string
	if json.Unmarshal([]byte(v), &learned) != nil {
		c.log.Warn("the replica's learnt server URLs do not decode; forgetting them")
		return nil
	}
	c.servers.learn(learned)
	return nil
}

// learnServers keeps what a welcome announced and records it in the
// replica when it changed.
func (c *Client) learnServers(ctx context.Context, announced []string) error {
	if !c.servers.learn(announced) {
		return nil
	}
	all := c.servers.all()
	learned := all[len(c.servers.configured):]
	c.log.Info("server URLs learnt from the server", "servers", learned)
	b, err := json.Marshal(learned)
	if err != nil {
		return err
	}
	return c.replica.setText(ctx, metaServers, string(b))
}
