package tributary

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalidStream is returned for a stream name that is not namespace.stream.
var ErrInvalidStream = errors.New("invalid stream name")

var streamPart = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$`)

// ParseStream splits a stream name "namespace.stream" into its namespace and
// table name. Both parts must be 1-128 characters of letters, digits, '_' and
// '-' (not leading); this is also the rule for Kafka topic names mapped onto
// streams. The error wraps ErrInvalidStream.
func ParseStream(stream string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(stream, ".")
	if !ok || !streamPart.MatchString(ns) || !streamPart.MatchString(n) {
		return "", "", fmt.Errorf("%w: %q (want namespace.stream of letters, digits, _ and -)", ErrInvalidStream, stream)
	}
	return ns, n, nil
}
