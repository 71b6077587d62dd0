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
// for mosquitto; Tributary keeps its SCRAM-SHA-256 credentials there, in
// lines `#tributary-scram-sha-256:user:ITERATIONS:SALT:STOREDKEY:SERVERKEY`
// that `tributary passwd` writes beside each $7$ line (SCRAM-SHA-512 needs
// none: its salted password is the $7$ hash itself).

// DefaultIterations is the PBKDF2 iteration count HashPassword uses
// (Kafka's SCRAM clients want at least 4096).
const DefaultIterations = 10000

const (
	saltLen      = 12
	scramComment = "#tributary-scram-sha-256:"
	maxLineBytes = 64 << 10
	maxUsers     = 1 << 20
)

// entry is one user's credentials from the password file.
type entry struct {
	kind   int // 6 or 7
	iter   int
	salt   []byte
	hash   []byte
	scram2 *SCRAMCredential // SCRAM-SHA-256, when the file has it
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
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLineBytes)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if rest, ok := strings.CutPrefix(line, scramComment); ok {
			user, cred, err := parseSCRAMLine(rest)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			scram[user] = cred
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

func parseSCRAMLine(rest string) (string, *SCRAMCredential, error) {
	f := strings.Split(rest, ":")
	if len(f) != 5 {
		return "", nil, errors.New("bad SCRAM-SHA-256 line")
	}
	iter, err := strconv.Atoi(f[1])
	b64 := base64.StdEncoding
	salt, e1 := b64.DecodeString(f[2])
	stored, e2 := b64.DecodeString(f[3])
	server, e3 := b64.DecodeString(f[4])
	if f[0] == "" || err != nil || iter < 1 || iter > 10_000_000 || e1 != nil || e2 != nil || e3 != nil ||
		len(stored) != sha256.Size || len(server) != sha256.Size {
		return "", nil, errors.New("bad SCRAM-SHA-256 line")
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

// scram512 is the SCRAM-SHA-512 credential of a $7$ entry: its hash is
// the salted password SCRAM derives (PBKDF2-HMAC-SHA512 over the salt).
func (e *entry) scram512() *SCRAMCredential {
	if e.kind != 7 {
		return nil
	}
	c := scramFromSalted(sha512.New, e.hash)
	c.Salt, c.Iterations = e.salt, e.iter
	return c
}

// scramFromSalted derives StoredKey and ServerKey from a salted password.
func scramFromSalted(newHash func() hash.Hash, salted []byte) *SCRAMCredential {
	clientKey := hmacSum(newHash, salted, []byte("Client Key"))
	serverKey := hmacSum(newHash, salted, []byte("Server Key"))
	h := newHash()
	h.Write(clientKey)
	return &SCRAMCredential{StoredKey: h.Sum(nil), ServerKey: serverKey}
}

// HashPassword is the password-file line for user: a $7$ PBKDF2-SHA512
// entry that mosquitto reads, followed by Tributary's SCRAM-SHA-256
// comment line (see the format above).
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
	hash, err := pbkdf2.Key(sha512.New, string(password), salt, DefaultIterations, sha512.Size)
	if err != nil {
		return "", err
	}
	salt2 := make([]byte, saltLen)
	rand.Read(salt2)
	salted2, err := pbkdf2.Key(sha256.New, string(password), salt2, DefaultIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	c := scramFromSalted(sha256.New, salted2)
	return fmt.Sprintf("%s:$7$%d$%s$%s\n%s%s:%d:%s:%s:%s\n", user, DefaultIterations, b64.EncodeToString(salt),
		b64.EncodeToString(hash), scramComment, user, DefaultIterations, b64.EncodeToString(salt2),
		b64.EncodeToString(c.StoredKey), b64.EncodeToString(c.ServerKey)), nil
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
		if strings.HasPrefix(t, user+":") || strings.HasPrefix(t, scramComment+user+":") {
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
		if strings.HasPrefix(t, user+":") || strings.HasPrefix(t, scramComment+user+":") {
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
