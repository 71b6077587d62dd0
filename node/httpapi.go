package node

import (
	"context"
	"errors"

	"github.com/tributary-io/tributary"
	"github.com/tributary-io/tributary/httpapi"
	kafka "github.com/tributary-io/tributary/kafka/produce"
)

// httpSink is the HTTP produce API's Sink: the node's ingest, with the
// Kafka produce side's rules for creating streams (kafka.auto_create,
// kafka.max_streams), so a stream an HTTP client may create is one a
// Kafka producer may.
type httpSink struct{ n *Node }

func (s httpSink) Produce(ctx context.Context, stream string, partition int32, recs []*tributary.Record) error {
	n := s.n
	if _, ok := n.book.Streams()[stream]; !ok {
		var err error
		if *n.cfg.Kafka.AutoCreate {
			_, err = n.kb.EnsureStream(ctx, stream)
		} else {
			_, err = n.kb.Topic(ctx, stream)
		}
		switch {
		case errors.Is(err, kafka.ErrUnknownStream):
			return httpapi.ErrUnknownStream
		case errors.Is(err, kafka.ErrStreamLimit):
			return errors.Join(httpapi.ErrStreamLimit, err)
		case err != nil:
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

// newHTTPProducer is the HTTP produce API of the node's HTTP port.
func (n *Node) newHTTPProducer() *httpapi.Producer {
	return httpapi.NewProducer(httpapi.ProducerConfig{ClusterID: n.cfg.Catalog.Name, Auth: n.auth,
		Limits: n.cfg.HTTPAPI.Limits(), Logger: n.log.With("component", "http-produce")}, httpSink{n})
}
