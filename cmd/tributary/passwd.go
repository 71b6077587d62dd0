package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/tributary-io/tributary/auth"
)

const passwdUsage = `usage:
  tributary passwd [-D] FILE USER

Creates or updates USER's entry in the password file FILE (the file
security.users_file names; created with mode 0600 if missing, in a
directory created with mode 0700 if missing). The
password is read from the terminal (twice, not echoed) or, when standard
input is not a terminal, from its first line. -D deletes USER instead.

The file is mosquitto-compatible: mosquitto and mosquitto_passwd read the
$7$ (PBKDF2-SHA512) lines it writes, and Tributary reads theirs. Each
entry written here also carries SCRAM-SHA-256 and SCRAM-SHA-512
credentials (StoredKey/ServerKey with their own salts, in comment lines
mosquitto ignores), so Kafka clients can use SCRAM as well as PLAIN.
Entries made by mosquitto_passwd (or an older tributary passwd) work for
MQTT, HTTP and Kafka PLAIN, not SCRAM: run this again for those users.
Keep the file secret (mode 0600) either way.
A running node reads the changed file within a few seconds.
`

func cmdPasswd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("passwd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, passwdUsage) }
	del := fs.Bool("D", false, "delete USER")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprint(stderr, passwdUsage)
		return 2
	}
	file, user := fs.Arg(0), fs.Arg(1)
	if *del {
		if err := auth.DeletePassword(file, user); err != nil {
			fmt.Fprintf(stderr, "tributary passwd: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "deleted %s from %s\n", user, file)
		return 0
	}
	if err := passwdDir(file, stdout); err != nil {
		fmt.Fprintf(stderr, "tributary passwd: %v\n", err)
		return 1
	}
	pw, err := readPassword(stdin, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tributary passwd: %v\n", err)
		return 1
	}
	if err := auth.SetPassword(file, user, pw); err != nil {
		fmt.Fprintf(stderr, "tributary passwd: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "set the password of %s in %s\n", user, file)
	return 0
}

// passwdDir makes sure the directory of a new password file exists:
// created (0700) when missing, or an error that says why not and what to do.
func passwdDir(file string, stdout io.Writer) error {
	dir := filepath.Dir(file)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: %s is not a directory", file, dir)
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("the directory %s of %s does not exist and cannot be created (%v): create it (e.g. sudo install -d -m 700 %s) or name a file in a directory you can write",
			dir, file, errors.Unwrap(err), dir)
	}
	fmt.Fprintf(stdout, "created directory %s\n", dir)
	return nil
}

// readPassword reads the new password: twice from a terminal without echo,
// else the first line of stdin.
func readPassword(stdin io.Reader, stderr io.Writer) ([]byte, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "Password: ")
		a, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		fmt.Fprint(stderr, "Reenter password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return nil, err
		}
		if string(a) != string(b) {
			return nil, errors.New("the passwords do not match")
		}
		return a, nil
	}
	line, err := bufio.NewReader(io.LimitReader(stdin, 64<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty password on standard input")
	}
	return []byte(line), nil
}
