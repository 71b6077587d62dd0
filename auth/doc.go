// Package auth is Tributary's one identity store and one access decision
// for every protocol: MQTT, Kafka, Pulsar, the REST catalog, HTTP and the
// debug endpoints.
//
// An Authority is opened from the security section (Config). Protocols
// turn what a client presents into a Principal — a password checked
// against a mosquitto-compatible password file ($7$ PBKDF2-SHA512, $6$
// salted SHA-512), a JSON Web Token (HS256 secret, RS256/ES256 public keys
// or a JWKS file), a verified client certificate (its subject CN), or
// nothing (anonymous, when allowed) — and then ask Allow whether that
// principal may perform an Action on a resource. Every authentication
// failure and every denial is one structured audit log line and one
// metric sample, by protocol and reason.
//
// # Invariants
//
//   - Default deny: when anonymous access is off, a request no rule
//     allows is denied; with no rules at all, only anonymous-open setups
//     (nothing to authenticate with) allow everything.
//   - Secrets are compared in constant time; password hashes are never
//     logged; a failed authentication says why in the audit log, never
//     to the client beyond the protocol's own "bad credentials".
//   - A principal never names itself anonymous: the name is reserved.
//   - Guessing is not free: an unknown user costs the same derivation as
//     a wrong password; derivations run in a bounded pool; repeated
//     failures per address and per user, across protocols, are refused
//     unchecked for a growing back-off (security.throttle).
//   - An identity lasts as long as its credential: a token IssueToken
//     made dies with its user's entry; a Principal carries its token's
//     expiry, at which its connections and streams end.
package auth
