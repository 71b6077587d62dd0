package httpapi

import "github.com/prometheus/client_golang/prometheus"

func counter(name, help string, f func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

func gauge(name, help string, f func() int64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

// Collectors are the Producer's metrics.
func (p *Producer) Collectors() []prometheus.Collector {
	s := &p.stats
	return []prometheus.Collector{
		counter("tributary_http_produced_records_total", "Records produced over HTTP and made durable.", s.Records.Load),
		counter("tributary_http_produced_bytes_total", "Value bytes of the records produced over HTTP.", s.Bytes.Load),
		counter("tributary_http_refused_records_total", "HTTP-produced records refused by back-pressure (budget, replication, fencing) or a denial: reported with 429/503/403.", s.Refused.Load),
		counter("tributary_http_malformed_total", "HTTP produce requests or records refused as malformed or over a cap (400, 413, 415).", s.Malformed.Load),
		gauge("tributary_http_produce_streams", "HTTP produce requests being served now.", s.Streams.Load),
		counter("tributary_http_produce_rejected_total", "HTTP produce requests refused at http_api.max_streams (429).", s.Rejected.Load),
	}
}

// Collectors are the Reader's metrics.
func (rd *Reader) Collectors() []prometheus.Collector {
	s := &rd.stats
	return []prometheus.Collector{
		counter("tributary_http_read_records_total", "Records served by the HTTP read API (long polls and event streams).", s.Records.Load),
		counter("tributary_http_read_bytes_total", "Value bytes of the records served over HTTP.", s.Bytes.Load),
		gauge("tributary_http_read_streams", "HTTP long polls and event streams being served now.", s.Streams.Load),
		counter("tributary_http_read_rejected_total", "HTTP reads refused at http.max_streams (429).", s.Rejected.Load),
	}
}
