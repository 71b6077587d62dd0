package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/grpcapi"
	"github.com/tributary-io/tributary/httpapi"
	kafka "github.com/tributary-io/tributary/kafka/produce"
	"github.com/tributary-io/tributary/tables"
)

// httpSink is the HTTP produce API's Sink: the node's ingest, with the
// Kafka produce side's rules for creating streams (kafka.auto_create,
// kafka.max_streams), so a stream an HTTP client may create is one a
// Kafka producer may.
type httpSink struct{ n *Node }

func (s httpSink) Produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	err := s.n.produce(ctx, stream, partition, recs)
	switch {
	case errors.Is(err, kafka.ErrUnknownStream):
		return httpapi.ErrUnknownStream
	case errors.Is(err, kafka.ErrStreamLimit):
		return errors.Join(httpapi.ErrStreamLimit, err)
	}
	return err
}

// grpcSink is httpSink for the gRPC produce API.
type grpcSink struct{ n *Node }

func (s grpcSink) Produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	err := s.n.produce(ctx, stream, partition, recs)
	switch {
	case errors.Is(err, kafka.ErrUnknownStream):
		return grpcapi.ErrUnknownStream
	case errors.Is(err, kafka.ErrStreamLimit):
		return errors.Join(grpcapi.ErrStreamLimit, err)
	}
	return err
}

// produce appends the records of an HTTP or gRPC producer; a stream
// that may not be created is kafka.ErrUnknownStream or
// kafka.ErrStreamLimit.
func (n *Node) produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	if tables.IsDLQ(stream) { // written by the uplink only, whether or not the table exists yet
		return fmt.Errorf("%s: %w: names ending in %s are the dead-letter tables of typed streams", stream, kafka.ErrUnknownStream, tables.DLQSuffix)
	}
	if _, ok := n.book.Streams()[stream]; !ok {
		var err error
		if *n.cfg.Kafka.AutoCreate {
			_, err = n.kb.EnsureStream(ctx, stream)
		} else {
			_, err = n.kb.Topic(ctx, stream)
		}
		if err != nil {
			return err
		}
	}
	if partition < 0 {
		return n.ingest.Append(ctx, recs...)
	}
	for _, r := range recs {
		r.Partition = partition
	}
	return n.ingest.appendOwned(ctx, recs...)
}

// newGRPCProducer is the gRPC produce API of the node's HTTP port.
func (n *Node) newGRPCProducer() *grpcapi.Producer {
	return grpcapi.NewProducer(grpcapi.ProducerConfig{Auth: n.auth, Logger: n.log.With("component", "grpc-produce"),
		Limits: grpcapi.Limits{MaxRecordBytes: int64(n.cfg.HTTPAPI.MaxRecordBytes), MaxStreams: n.cfg.HTTPAPI.MaxStreams}}, grpcSink{n})
}

// httpProtocols are the node HTTP port's: HTTP/1.1, HTTP/2 over TLS and
// unencrypted HTTP/2 (h2c), which gRPC clients without TLS speak.
func httpProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// newHTTPProducer is the HTTP produce API of the node's HTTP port.
func (n *Node) newHTTPProducer() *httpapi.Producer {
	return httpapi.NewProducer(httpapi.ProducerConfig{ClusterID: n.cfg.Catalog.Name, Auth: n.auth,
		Limits: n.cfg.HTTPAPI.Limits(), Logger: n.log.With("component", "http-produce")}, httpSink{n})
}
