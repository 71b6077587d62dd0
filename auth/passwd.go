package auth

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"strings"
)

// Password file format, as mosquitto_passwd writes it (one user a line):
//
//	user:$7$ITERATIONS$SALT$HASH   PBKDF2-HMAC-SHA512, 64-byte hash
//	user:$6$SALT$HASH              SHA-512(password || salt) (mosquitto 1.x)
//
// SALT and HASH are standard base64. Lines starting with # are comments
// for mosquitto; Tributary keeps its SCRAM credentials there, in lines
// `#tributary-scram-sha-256:user:ITERATIONS:SALT:STOREDKEY:SERVERKEY` and
// `#tributary-scram-sha-512:...` (the same fields) that `tributary passwd`
// writes beside each $7$ line, each with a salt of its own. The $7$ hash
// is never used as SCRAM-SHA-512's salted password: that would make the
// file password-equivalent (whoever reads it could log in as anyone). An
// entry without a SCRAM-SHA-512 line cannot use that mechanism.

// DefaultIterations is the PBKDF2 iteration count HashPassword uses
// (Kafka's SCRAM clients want at least 4096).
const DefaultIterations = 10000

const (
	saltLen         = 12
	scramComment    = "#tributary-scram-sha-256:"
	scram512Comment = "#tributary-scram-sha-512:"
	maxLineBytes    = 64 << 10
	maxUsers        = 1 << 20
)

// entry is one user's credentials from the password file.
type entry struct {
	kind   int // 6 or 7
	iter   int
	salt   []byte
	hash   []byte
	scram2 *SCRAMCredential // SCRAM-SHA-256, when the file has it
	scram5 *SCRAMCredential // SCRAM-SHA-512, when the file has it
	line   string
}

// SCRAMCredential is what a SCRAM server stores for one user and
// mechanism (RFC 5802): the salt, the iteration count, StoredKey and
// ServerKey.
type SCRAMCredential struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// parsePasswd reads a password file.
func parsePasswd(r io.Reader) (map[string]*entry, error) {
	users := map[string]*entry{}
	scram := map[string]*SCRAMCredential{}
	scram5 := map[string]*SCRAMCredential{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, scramComment); ok {
			user, cred, err := parseSCRAMLine(rest, "SCRAM-SHA-256", sha256.Size)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			scram[user] = cred
			continue
		}
		if rest, ok := strings.CutPrefix(line, scram512Comment); ok {
			user, cred, err := parseSCRAMLine(rest, "SCRAM-SHA-512", sha512.Size)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			scram5[user] = cred
			continue
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("line %d: want user:$7$..., got no user name", n)
		}
		e, err := parseHash(hash)
		if err != nil {
			return nil, fmt.Errorf("line %d (user %q): %w", n, user, err)
		}
		if len(users) >= maxUsers {
			return nil, fmt.Errorf("more than %d users", maxUsers)
		}
		e.line = line
		users[user] = e
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for u, c := range scram {
		if e, ok := users[u]; ok {
			e.scram2 = c
		}
	}
	for u, c := range scram5 {
		if e, ok := users[u]; ok {
			e.scram5 = c
		}
	}
	return users, nil
}

func parseHash(h string) (*entry, error) {
	parts := strings.Split(h, "$")
	b64 := base64.StdEncoding
	switch {
	case len(parts) == 5 && parts[0] == "" && parts[1] == "7":
		iter, err := strconv.Atoi(parts[2])
		if err != nil || iter < 1 || iter > 10_000_000 {
			return nil, fmt.Errorf("bad iteration count %q", parts[2])
		}
		salt, err1 := b64.DecodeString(parts[3])
		hash, err2 := b64.DecodeString(parts[4])
		if err1 != nil || err2 != nil || len(hash) != sha512.Size {
			return nil, errors.New("bad $7$ salt or hash")
		}
		return &entry{kind: 7, iter: iter, salt: salt, hash: hash}, nil
	case len(parts) == 4 && parts[0] == "" && parts[1] == "6":
		salt, err1 := b64.DecodeString(parts[2])
		hash, err2 := b64.DecodeString(parts[3])
		if err1 != nil || err2 != nil || len(hash) != sha512.Size {
			return nil, errors.New("bad $6$ salt or hash")
		}
		return &entry{kind: 6, salt: salt, hash: hash}, nil
	}
	return nil, errors.New("unknown hash format (want $7$ as mosquitto_passwd writes, or $6$)")
}

func parseSCRAMLine(rest, mech string, size int) (string, *SCRAMCredential, error) {
	f := strings.Split(rest, ":")
	if len(f) != 5 {
		return "", nil, fmt.Errorf("bad %s line", mech)
	}
	iter, err := strconv.Atoi(f[1])
	b64 := base64.StdEncoding
	salt, e1 := b64.DecodeString(f[2])
	stored, e2 := b64.DecodeString(f[3])
	server, e3 := b64.DecodeString(f[4])
	if f[0] == "" || err != nil || iter < 1 || iter > 10_000_000 || e1 != nil || e2 != nil || e3 != nil ||
		len(stored) != size || len(server) != size {
		return "", nil, fmt.Errorf("bad %s line", mech)
	}
	return f[0], &SCRAMCredential{Salt: salt, Iterations: iter, StoredKey: stored, ServerKey: server}, nil
}

// verify checks password against e in constant time.
func (e *entry) verify(password []byte) bool {
	var got []byte
	switch e.kind {
	case 7:
		got, _ = pbkdf2.Key(sha512.New, string(password), e.salt, e.iter, sha512.Size)
	case 6:
		h := sha512.New()
		h.Write(password)
		h.Write(e.salt)
		got = h.Sum(nil)
	default:
		return false
	}
	return subtle.ConstantTimeCompare(got, e.hash) == 1
}

// scramFromSalted derives StoredKey and ServerKey from a salted password.
func scramFromSalted(newHash func() hash.Hash, salted []byte) *SCRAMCredential {
	clientKey := hmacSum(newHash, salted, []byte("Client Key"))
	serverKey := hmacSum(newHash, salted, []byte("Server Key"))
	h := newHash()
	h.Write(clientKey)
	return &SCRAMCredential{StoredKey: h.Sum(nil), ServerKey: serverKey}
}

// HashPassword is the password-file lines for user: a $7$ PBKDF2-SHA512
// entry that mosquitto reads, followed by Tributary's SCRAM-SHA-256 and
// SCRAM-SHA-512 comment lines, each with its own salt (see the format
// above).
func HashPassword(user string, password []byte) (string, error) {
	if user == "" || strings.ContainsAny(user, ":\n\r") || user == anonymousName {
		return "", fmt.Errorf("bad user name %q: must be non-empty, without ':' or newlines, and not %q", user, anonymousName)
	}
	if len(password) == 0 {
		return "", errors.New("empty password")
	}
	b64 := base64.StdEncoding
	salt := make([]byte, saltLen)
	rand.Read(salt)
	h7, err := pbkdf2.Key(sha512.New, string(password), salt, DefaultIterations, sha512.Size)
	if err != nil {
		return "", err
	}
	line := fmt.Sprintf("%s:$7$%d$%s$%s\n", user, DefaultIterations, b64.EncodeToString(salt), b64.EncodeToString(h7))
	for _, m := range []struct {
		prefix  string
		newHash func() hash.Hash
	}{{scramComment, sha256.New}, {scram512Comment, sha512.New}} {
		c, err := NewSCRAMCredential(m.newHash, password, DefaultIterations)
		if err != nil {
			return "", err
		}
		line += fmt.Sprintf("%s%s:%d:%s:%s:%s\n", m.prefix, user, c.Iterations, b64.EncodeToString(c.Salt),
			b64.EncodeToString(c.StoredKey), b64.EncodeToString(c.ServerKey))
	}
	return line, nil
}

// NewSCRAMCredential derives a SCRAM credential for password with a fresh
// salt (RFC 5802: SaltedPassword = PBKDF2(password, salt, iterations)).
func NewSCRAMCredential(newHash func() hash.Hash, password []byte, iterations int) (*SCRAMCredential, error) {
	salt := make([]byte, saltLen)
	rand.Read(salt)
	salted, err := pbkdf2.Key(newHash, string(password), salt, iterations, newHash().Size())
	if err != nil {
		return nil, err
	}
	c := scramFromSalted(newHash, salted)
	c.Salt, c.Iterations = salt, iterations
	return c, nil
}

// SetPassword creates or updates user's entry in the password file at
// path (created with mode 0600 if missing), keeping every other line.
// The file is replaced atomically.
func SetPassword(path, user string, password []byte) error {
	line, err := HashPassword(user, password)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out bytes.Buffer
	for _, l := range strings.SplitAfter(string(old), "\n") {
		t := strings.TrimRight(l, "\r\n")
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, user+":") || strings.HasPrefix(t, scramComment+user+":") ||
			strings.HasPrefix(t, scram512Comment+user+":") {
			continue
		}
		out.WriteString(t + "\n")
	}
	out.WriteString(line)
	if _, err := parsePasswd(bytes.NewReader(out.Bytes())); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// DeletePassword removes user from the password file at path.
func DeletePassword(path, user string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	found := false
	for _, l := range strings.SplitAfter(string(old), "\n") {
		t := strings.TrimRight(l, "\r\n")
		if strings.HasPrefix(t, user+":") || strings.HasPrefix(t, scramComment+user+":") ||
			strings.HasPrefix(t, scram512Comment+user+":") {
			found = true
			continue
		}
		if t != "" {
			out.WriteString(t + "\n")
		}
	}
	if !found {
		return fmt.Errorf("%s: no user %q", path, user)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func hmacSum(newHash func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(newHash, key)
	m.Write(msg)
	return m.Sum(nil)
}
