package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary-io/tributary/auth"
	"github.com/tributary-io/tributary/config"
	"github.com/tributary-io/tributary/listen"
	"gopkg.in/yaml.v3"
)

// loadSecurityFiles loads what a security section names — certificates,
// keys and CAs, the password file, the JWT keys — as a start would, so
// that `tributary config check` and `tributary cloud --check` fail on a
// missing or bad file (the error names the field).
func loadSecurityFiles(s config.Security) error {
	if _, err := listen.NewTLS(s.TLS, nil); err != nil {
		return err
	}
	_, err := auth.Open(s.Config, slog.New(slog.DiscardHandler))
	return err
}

// loadCAFile checks that path (the value of field) holds PEM certificates.
func loadCAFile(field, path string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s %s: no PEM certificate in it", field, path)
	}
	return nil
}

// readSecurity decodes path, a YAML file with the keys of a security
// section (--security FILE of dev and cloud), with or without the
// security: level above them, into s; "" leaves s alone.
// The section's Validate runs with the rest of the config.
func readSecurity(path string, s *config.Security) error {
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--security: %w", err)
	}
	// The file may be a security section on its own or one under a
	// security: key (as an edge config has it, docs/security.md "Secure a site").
	var probe map[string]any
	if yaml.Unmarshal(raw, &probe) == nil && len(probe) == 1 && probe["security"] != nil {
		var wrapped struct {
			Security *config.Security `yaml:"security"`
		}
		wrapped.Security = s
		if err := config.Decode(raw, &wrapped); err != nil {
			return fmt.Errorf("--security: %w", config.InFile(path, err))
		}
		return nil
	}
	if err := config.Decode(raw, s); err != nil {
		return fmt.Errorf("--security: %w", config.InFile(path, err))
	}
	return nil
}

// onSIGHUP calls each reload on every SIGHUP until ctx ends: certificates
// (listen.TLS.Reload), the password file and the JWT keys
// (auth.Authority.Reload) are read again without a restart. A failed
// reload keeps what was loaded before; its error is logged here.
func onSIGHUP(ctx context.Context, log *slog.Logger, reloads ...func() error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				log.Info("SIGHUP: reloading certificates, password file and JWT keys")
				for _, r := range reloads {
					if err := r(); err != nil {
						log.Error("reload failed; what was loaded before stays in force", "err", err)
					}
				}
			}
		}
	}()
}
