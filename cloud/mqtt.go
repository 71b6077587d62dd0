package cloud

import (
	"context"
	"fmt"
	"net"

	"github.com/tributary-io/tributary/cloudmqtt"
)

// MQTTConfig is the cloud MQTT listener (package cloudmqtt): MQTT 3.1.1
// and 5 subscribers served from the stream tables, read-only, with
// persistent sessions in the catalog database.
type MQTTConfig struct {
	// Addr of the MQTT TCP listener (TLS name "mqtt"). Default "" (off);
	// `tributary dev` serves it on 127.0.0.1:11883.
	Addr string `yaml:"addr"`
	// WSAddr of the MQTT-over-WebSocket listener (TLS name "mqtt_ws").
	// Default "" (off).
	WSAddr string `yaml:"ws_addr"`
	// WSAllowedOrigins are the browser origins (scheme://host[:port], or
	// "*") the WebSocket listener accepts besides its own host. Default
	// none: a page of another site is refused (403); clients that send no
	// Origin are not browsers and pass.
	WSAllowedOrigins []string `yaml:"ws_allowed_origins"`
	// Limits is max_inflight, max_subscriptions, max_session_expiry and
	// write_timeout (package cloudmqtt's section).
	cloudmqtt.Limits `yaml:",inline"`
}

func (m *MQTTConfig) defaults() { m.Limits.Defaults() }

func (m *MQTTConfig) validate(bad func(field, format string, args ...any)) {
	for field, a := range map[string]string{"mqtt.addr": m.Addr, "mqtt.ws_addr": m.WSAddr} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad(field, "%q: want host:port, or \"\" to turn the listener off", a)
		}
	}
	m.Limits.Validate("mqtt.", bad)
}

// listenMQTT starts the cloud MQTT listener when an address is set.
func (s *Server) listenMQTT() error {
	m := s.cfg.MQTT
	if m.Addr == "" && m.WSAddr == "" {
		return nil
	}
	ms, err := cloudmqtt.New(cloudmqtt.Config{Addr: m.Addr, WSAddr: m.WSAddr,
		TLS: s.tls.Server("mqtt"), WSTLS: s.tls.Server("mqtt_ws"), SessionsDB: s.cfg.State.URI, Auth: s.auth,
		Limits: m.Limits, Logger: s.log, WSAllowedOrigins: m.WSAllowedOrigins, LoopbackHosts: s.openLoopback(m.WSAddr)}, s.reader)
	if err != nil {
		return fmt.Errorf("cloud mqtt: %w", err)
	}
	s.mqtt = ms
	if err := ms.Listen(); err != nil {
		return err
	}
	s.reg.MustRegister(ms.Collectors()...)
	return nil
}

// MQTTAddr is the bound address of the cloud MQTT TCP listener ("" when off).
func (s *Server) MQTTAddr() string {
	if s.mqtt == nil {
		return ""
	}
	return s.mqtt.Addr()
}

// MQTTWSAddr is the bound address of the cloud MQTT WebSocket listener ("" when off).
func (s *Server) MQTTWSAddr() string {
	if s.mqtt == nil {
		return ""
	}
	return s.mqtt.WSAddr()
}

func (s *Server) closeMQTT(ctx context.Context) error {
	if s.mqtt == nil {
		return nil
	}
	if err := s.mqtt.Close(ctx); err != nil {
		return fmt.Errorf("close cloud mqtt: %w", err)
	}
	return nil
}
