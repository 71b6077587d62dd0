package auth

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	successes *prometheus.CounterVec
	failures  *prometheus.CounterVec
	denials   *prometheus.CounterVec
}

func newMetrics() *metrics {
	return (&metrics{
		successes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_successes_total",
			Help: "Successful authentications, by protocol and method (password, token, certificate, anonymous)."},
			[]string{"protocol", "method"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_failures_total",
			Help: "Failed authentications, by protocol and reason (unknown_user, bad_password, token_expired, ...)."},
			[]string{"protocol", "reason"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_denials_total",
			Help: "Requests the ACL denied, by protocol and action."},
			[]string{"protocol", "action"}),
	}).init()
}

// init sets the usual label combinations to zero, so that a dashboard's
// rate() has a series from the start (the Prometheus practice for counters
// whose first increment is an event worth seeing).
func (m *metrics) init() *metrics {
	for _, p := range []string{"mqtt", "kafka", "pulsar", "rest", "http", "grpc"} {
		for _, r := range []string{"unknown_user", "bad_password", "no_credentials", "bad_token", "token_expired"} {
			m.failures.WithLabelValues(p, r)
		}
	}
	for _, pa := range [][2]string{{"mqtt", "publish"}, {"mqtt", "subscribe"}, {"mqtt", "connect"}, {"kafka", "produce"},
		{"kafka", "consume"}, {"pulsar", "consume"}, {"rest", "consume"}, {"rest", "write"}, {"rest", "admin"}, {"http", "admin"},
		{"http", "produce"}, {"http", "consume"}, {"grpc", "produce"}, {"grpc", "consume"}} {
		m.denials.WithLabelValues(pa[0], pa[1])
	}
	return m
}

func (m *metrics) success(protocol string, method Method) {
	m.successes.WithLabelValues(protocol, string(method)).Inc()
}
func (m *metrics) failure(protocol, reason string) {
	m.failures.WithLabelValues(protocol, reason).Inc()
}
func (m *metrics) denial(protocol string, a Action) {
	m.denials.WithLabelValues(protocol, string(a)).Inc()
}

// Collectors are the authority's metrics, to register with a Prometheus
// registry.
func (a *Authority) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.metrics.successes, a.metrics.failures, a.metrics.denials}
}
