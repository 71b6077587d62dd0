package grpcapi

import "github.com/prometheus/client_golang/prometheus"

func counter(name, help string, f func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
}

// Collectors are the Producer's metrics.
func (p *Producer) Collectors() []prometheus.Collector {
	s := &p.stats
	return []prometheus.Collector{
		counter("tributary_grpc_produced_records_total", "Records produced over gRPC and made durable.", s.Records.Load),
		counter("tributary_grpc_produced_bytes_total", "Value bytes of the records produced over gRPC.", s.Bytes.Load),
		counter("tributary_grpc_refused_records_total", "gRPC-produced records answered with an error (back-pressure, a bad field, a denial).", s.Refused.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_grpc_produce_streams", Help: "gRPC Produce calls being served now."},
			func() float64 { return float64(s.Streams.Load()) }),
		counter("tributary_grpc_produce_rejected_total", "gRPC Produce calls refused at http_api.max_streams (RESOURCE_EXHAUSTED).", s.Rejected.Load),
	}
}

// Collectors are the Reader's metrics.
func (rd *Reader) Collectors() []prometheus.Collector {
	s := &rd.stats
	return []prometheus.Collector{
		counter("tributary_grpc_fetched_records_total", "Records served by gRPC Fetch.", s.Records.Load),
		counter("tributary_grpc_fetched_bytes_total", "Key and value bytes served by gRPC Fetch.", s.Bytes.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tributary_grpc_fetch_streams", Help: "gRPC Fetch calls being served now."},
			func() float64 { return float64(s.Streams.Load()) }),
		counter("tributary_grpc_fetch_rejected_total", "gRPC Fetch calls refused at http.max_streams (RESOURCE_EXHAUSTED).", s.Rejected.Load),
	}
}
