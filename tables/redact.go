package tables

import (
	"net/url"
	"regexp"
	"strings"
)

// Redact returns a catalog or state database URI (or a keyword/value DSN)
// fit to print: the password of its user info, and the values of query
// parameters and keywords that name a secret (password, passfile
// contents, token, secret, key, credential), become "xxxxx". Everything
// printed by `tributary config check`, the status page and errors goes
// through it.
func Redact(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.Scheme != "" && strings.Contains(uri, "://") {
		if u.User != nil {
			if _, ok := u.User.Password(); ok {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		if u.RawQuery != "" {
			q := u.Query()
			for k := range q {
				if secretKey(k) {
					q.Set(k, "xxxxx")
				}
			}
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	// keyword/value form: host=h user=u password=secret dbname=d
	return kvSecret.ReplaceAllStringFunc(uri, func(m string) string {
		k, _, _ := strings.Cut(m, "=")
		if !secretKey(strings.TrimSpace(k)) {
			return m
		}
		return k + "=xxxxx"
	})
}

var kvSecret = regexp.MustCompile(`[A-Za-z_]+\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"pass", "secret", "token", "key", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}
