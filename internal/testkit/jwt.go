package testkit

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// HS256Token is a JWT for subject sub signed with secret, expiring after
// ttl (negative: expired that long ago).
func HS256Token(tb testing.TB, secret []byte, sub string, ttl time.Duration) string {
	tb.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(ttl).Unix()}).SignedString(secret)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
