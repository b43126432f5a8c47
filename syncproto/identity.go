package syncproto

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxUserBytes bounds a user name (a JWT's sub, a token's --user).
const MaxUserBytes = 256

// maxPlainUserBytes is the longest user name used verbatim as its device
// namespace, leaving at least 23 bytes of a client id for the device.
const maxPlainUserBytes = 40

// ValidateUser reports whether user is a valid user name: 1 to
// MaxUserBytes bytes of UTF-8 without control characters. The error is an
// *Error with CodeBadRequest.
func ValidateUser(user string) error {
	if user == "" || len(user) > MaxUserBytes || !utf8.ValidString(user) || strings.ContainsFunc(user, unicode.IsControl) {
		return Errorf(CodeBadRequest, "user %q must be 1 to %d bytes of UTF-8 without control characters", truncate(user), MaxUserBytes)
	}
	return nil
}

// DeviceNamespace is the prefix every client id of user's devices starts
// with when the device chooses its own client id (PROTOCOL.md section 1.1):
// the user name and ':' when the name is 1 to 40 bytes of ASCII letters,
// digits, '.', '_' and '-' not starting with '_'; otherwise '_', the first
// 24 hex digits of the name's SHA-256, and ':'. No two users share a
// namespace: a plain name never starts with '_' nor holds ':', and a
// digest is long enough that finding a collision is out of reach.
func DeviceNamespace(user string) string {
	plain := len(user) <= maxPlainUserBytes && user != "" && user[0] != '_' && !strings.Contains(user, ":") && isID(user)
	if plain {
		return user + ":"
	}
	sum := sha256.Sum256([]byte(user))
	return "_" + hex.EncodeToString(sum[:12]) + ":"
}

// DeviceClientID is the client id of user's device named device:
// DeviceNamespace(user) followed by device. It fails with CodeInvalidClientID
// when the result is not a valid client id (IDPattern).
func DeviceClientID(user, device string) (string, error) {
	id := DeviceNamespace(user) + device
	if device == "" || !isID(id) {
		return "", Errorf(CodeInvalidClientID, "device %q of user %q does not make a client id matching %s", truncate(device), truncate(user), IDPattern)
	}
	return id, nil
}

// InDeviceNamespace reports whether clientID is a valid client id inside
// namespace (a DeviceNamespace result) with a non-empty device part.
func InDeviceNamespace(clientID, namespace string) bool {
	device, ok := strings.CutPrefix(clientID, namespace)
	return ok && device != "" && isID(clientID)
}
