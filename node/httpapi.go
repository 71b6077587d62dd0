package node

import (
	"net/http"

	"github.com/tributary-io/tributary/grpcapi"
	"github.com/tributary-io/tributary/httpapi"
)

// newGRPCProducer is the gRPC produce API of the node's HTTP port.
func (n *Node) newGRPCProducer() *grpcapi.Producer {
	return grpcapi.NewProducer(grpcapi.ProducerConfig{Auth: n.auth, Logger: n.log.With("component", "grpc-produce"),
		Limits: grpcapi.Limits{MaxRecordBytes: int64(n.cfg.HTTPAPI.MaxRecordBytes), MaxStreams: n.cfg.HTTPAPI.MaxStreams}}, n.ingest)
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
		Limits: n.cfg.HTTPAPI.Limits(), Logger: n.log.With("component", "http-produce")}, n.ingest)
}
