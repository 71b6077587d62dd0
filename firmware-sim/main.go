package firmwaresim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main is the `tributary sim` subcommand: it parses args (without the
// subcommand name), runs the fleet until SIGINT/SIGTERM, -duration or
// -messages, prints the summary to stdout and returns the exit status:
// 0 on success, 1 when the run failed (bad broker, could not connect) or
// publishes were attempted but none was acked, 2 for bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg Config
	var qos int
	var verbose, asJSON bool
	var progress time.Duration
	fs.StringVar(&cfg.Broker, "broker", "tcp://127.0.0.1:1883", "MQTT broker URL (tcp://, ws://, tls://)")
	fs.IntVar(&cfg.Devices, "devices", 10, "number of simulated devices (one MQTT connection each)")
	fs.Float64Var(&cfg.Rate, "rate", 1, "messages per second per device; 0 = as fast as possible")
	fs.IntVar(&cfg.InFlight, "inflight", 1, "max unacknowledged QoS 1/2 publishes per device")
	fs.IntVar(&qos, "qos", 1, "publish QoS: 0, 1 or 2")
	fs.StringVar(&cfg.TopicPattern, "topic", "factory/line{line}/device{device}/telemetry", "topic pattern; {device} and {line} are substituted")
	fs.IntVar(&cfg.Lines, "lines", 4, "number of production lines ({line} = device % lines)")
	fs.IntVar(&cfg.PayloadSize, "payload-size", 0, "0 = realistic JSON telemetry; N = fixed payloads of exactly N bytes")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long; 0 = until SIGINT/SIGTERM or -messages")
	fs.IntVar(&cfg.Messages, "messages", 0, "messages per device; 0 = unlimited")
	fs.StringVar(&cfg.ClientIDPrefix, "client-prefix", "sim", "client IDs are <prefix>-<index>")
	fs.IntVar(&cfg.MQTTVersion, "mqtt-version", 5, "MQTT protocol version (only 5 is supported)")
	fs.BoolVar(&cfg.UserProperties, "user-props", false, "attach MQTT 5 user properties device, line, seq")
	fs.DurationVar(&cfg.BurstEvery, "burst-every", 0, "each device sends an extra burst this often (needs -rate > 0)")
	fs.IntVar(&cfg.BurstSize, "burst-size", 0, "messages per burst")
	fs.Int64Var(&cfg.Seed, "seed", 1, "random seed for payloads and schedules")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 10*time.Second, "fail if the fleet is not connected within this")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 5*time.Second, "time in-flight publishes get to be acked after the stop")
	fs.DurationVar(&progress, "progress", 0, "print running totals to stderr this often; 0 = never")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON (durations in nanoseconds)")
	fs.BoolVar(&verbose, "v", false, "log connection events to stderr")
	fs.StringVar(&cfg.Username, "username", "", "MQTT user name ({device} = the device index); default anonymous")
	fs.StringVar(&cfg.Password, "password", os.Getenv("TRIBUTARY_SIM_PASSWORD"), "MQTT password (default $TRIBUTARY_SIM_PASSWORD)")
	cafile := fs.String("cafile", "", "PEM CA certificates that verify a tls:// or wss:// broker (default: the system roots)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sim: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	switch qos {
	case 0:
		cfg.QoS = QoS0
	case 1, 2:
		cfg.QoS = byte(qos)
	default:
		fmt.Fprintf(stderr, "sim: -qos must be 0, 1 or 2\n")
		return 2
	}
	if *cafile != "" {
		pem, err := os.ReadFile(*cafile)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "sim: -cafile %s: no PEM certificates (%v)\n", *cafile, err)
			return 2
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if cfg.Devices <= 0 || cfg.InFlight <= 0 || cfg.Lines <= 0 {
		fmt.Fprintf(stderr, "sim: -devices, -inflight and -lines must be positive\n")
		return 2
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if progress > 0 {
		cfg.ProgressEvery = progress
		cfg.Progress = func(s Summary) {
			fmt.Fprintf(stderr, "%6.1fs sent %d acked %d failed %d reconnects %d  %.0f msg/s  p99 %s\n",
				s.Elapsed.Seconds(), s.Sent, s.Acked, s.Failed, s.Reconnects, s.MsgsPerSec(), fmtDur(s.Latency.P99))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		out := struct {
			Summary
			MsgsPerSec float64 `json:"msgs_per_sec"`
		}{sum, sum.MsgsPerSec()}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "sim: %v\n", err)
			return 1
		}
	} else {
		fmt.Fprint(stdout, sum.String())
	}
	if sum.Sent > 0 && sum.Acked == 0 {
		return 1
	}
	return 0
}
