package auth

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	successes *prometheus.CounterVec
	failures  *prometheus.CounterVec
	denials   *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		successes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_successes_total",
			Help: "Successful authentications, by protocol and method (password, token, certificate, anonymous)."},
			[]string{"protocol", "method"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_failures_total",
			Help: "Failed authentications, by protocol and reason (unknown_user, bad_password, token_expired, ...)."},
			[]string{"protocol", "reason"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_auth_denials_total",
			Help: "Requests the ACL denied, by protocol and action."},
			[]string{"protocol", "action"}),
	}
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
