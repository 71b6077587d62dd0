package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// onSIGHUP calls each reload on every SIGHUP until ctx ends: certificates
// (listen.TLS.Reload) are read again without a restart. A failed reload
// keeps what was loaded before; it logs its own error.
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
				log.Info("SIGHUP: reloading certificates")
				for _, r := range reloads {
					_ = r()
				}
			}
		}
	}()
}
