package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/syncd-dev/syncd/internal/sqlitedb"
	"github.com/syncd-dev/syncd/syncproto"
)

// Names of the sign-in settings the client keeps in its replica
// (meta_text), for operators' tools that read the replica file while the
// app is stopped or running (syncctl explain, through ReadSignIn).
const (
	// metaTenant names the tenant of the last welcome (welcome.tenant).
	metaTenant = "tenant"
	// metaUser names the user of the last welcome (welcome.user).
	metaUser = "user"
	// metaTokenRefusal names the server's last refusal of the device's
	// token (a TokenRefusal as JSON), "" once a session is bound.
	metaTokenRefusal = "token_refusal"
)

// TokenRefusal is the server's refusal of a device's token, as the client
// records it in its replica: the device cannot replay until it has a token
// the server accepts.
type TokenRefusal struct {
	// Code is unauthorized (a bad, revoked or denied token),
	// token_expired or wrong_client_id.
	Code    syncproto.Code `json:"code"`
	Message string         `json:"message"`
	At      time.Time      `json:"at"`
}

// SignIn is what a replica records of its device's sign-in.
type SignIn struct {
	// Tenant is the tenant of the last welcome; "" before the first one,
	// or from a server that does not send it.
	Tenant string
	// User is the user of the last welcome; "" when the token names none.
	User string
	// Refusal is set while the server's last word on the device's token
	// was a refusal (no session was bound since).
	Refusal *TokenRefusal
}

// ReadSignIn reads the sign-in record of the replica at path (the queue
// file when the replica shares a SQLite queue's file) without changing
// it. A replica made before the record existed reads as an empty SignIn.
func ReadSignIn(ctx context.Context, path string) (SignIn, error) {
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{ReadOnly: true})
	if err != nil {
		return SignIn{}, fmt.Errorf("read sign-in: %w", err)
	}
	defer db.Close()
	text := func(name string) (string, error) {
		var v string
		err := db.QueryRowContext(ctx, `SELECT value FROM meta_text WHERE name = ?`, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		return v, err
	}
	var s SignIn
	if s.Tenant, err = text(metaTenant); err != nil {
		return SignIn{}, fmt.Errorf("read sign-in of %s: not a client replica: %w", path, err)
	}
	if s.User, err = text(metaUser); err != nil {
		return SignIn{}, fmt.Errorf("read sign-in of %s: %w", path, err)
	}
	refusal, err := text(metaTokenRefusal)
	if err != nil {
		return SignIn{}, fmt.Errorf("read sign-in of %s: %w", path, err)
	}
	if refusal != "" {
		s.Refusal = new(TokenRefusal)
		if err := json.Unmarshal([]byte(refusal), s.Refusal); err != nil {
			return SignIn{}, fmt.Errorf("read sign-in of %s: token refusal: %w", path, err)
		}
	}
	return s, nil
}

// tokenRefusalCode reports whether a refusal code is about the device's
// token: only a new token (or a new configuration) ends it.
func tokenRefusalCode(c syncproto.Code) bool {
	return c == syncproto.CodeUnauthorized || c == syncproto.CodeTokenExpired || c == syncproto.CodeWrongClientID
}

// recordSignIn keeps the tenant and user of a welcome and clears a
// recorded token refusal: the session was bound. Only what changed is
// written.
func (c *Client) recordSignIn(ctx context.Context, w *syncproto.Welcome) error {
	for _, kv := range [][2]string{{metaTenant, w.Tenant}, {metaUser, w.User}, {metaTokenRefusal, ""}} {
		if kv[0] == metaTenant && kv[1] == "" {
			continue // an older server's welcome: keep what an earlier one said
		}
		had, err := c.replica.text(ctx, kv[0])
		if err != nil {
			return err
		}
		if had != kv[1] {
			if err := c.replica.setText(ctx, kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordTokenRefusal keeps the server's refusal of the device's token in
// the replica, for syncctl explain; a failure is logged only, the refusal
// being reported through Status already.
func (c *Client) recordTokenRefusal(re *RefusedError) {
	if !tokenRefusalCode(re.Code) {
		return
	}
	b, err := json.Marshal(TokenRefusal{Code: re.Code, Message: re.Message, At: c.now().UTC()})
	if err == nil {
		err = c.replica.setText(c.ctx, metaTokenRefusal, string(b))
	}
	if err != nil && c.ctx.Err() == nil {
		c.log.Warn("recording the token refusal in the replica failed", "err", err)
	}
}
