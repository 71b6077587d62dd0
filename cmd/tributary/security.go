package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tributary-io/tributary/config"
)

// readSecurity decodes path, a YAML file with the keys of a security
// section (--security FILE of dev and cloud), into s; "" leaves s alone.
// The section's Validate runs with the rest of the config.
func readSecurity(path string, s *config.Security) error {
	if path == "" {
		return nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--security: %w", err)
	}
	if err := config.Decode(raw, s); err != nil {
		return fmt.Errorf("--security %s: %w", path, err)
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
