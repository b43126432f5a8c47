// Package auth owns syncd's principals and the token file that maps bearer
// tokens to them.
//
// A token is "sdk_<id>_<secret>" ("sda_<id>_<secret>" for an admin token,
// so the two are told apart at a glance; admin tokens issued before with
// "sdk_" are still accepted): the id names the token (for listing and
// revocation, safe to log), the secret proves possession. The token file
// stores only a SHA-256 of the secret; tokens are random 256-bit values, so a
// fast hash is enough and a stolen file reveals no usable token.
//
// A principal is what a token may do: act as exactly one client id within
// one tenant, read and write listed models ("*" for all), or administer the
// server (admin tokens authorise the admin listener only).
//
// The file is re-read when it changes on disk (checked at most once a
// second, on use), so `syncctl token revoke` takes effect without a restart.
package auth
