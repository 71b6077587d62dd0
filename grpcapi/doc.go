// Package grpcapi is Tributary's gRPC front door to the stream tables,
// served with connectrpc.com/connect (one handler speaks gRPC, gRPC-Web
// and Connect, binary or JSON): ProduceService at the edge (Producer,
// mounted by `node` on http_addr) and ReadService in the cloud (Reader,
// mounted by `cloud` on http.addr; gRPC needs HTTP/2, h2c without TLS).
// The .proto and the generated code are in grpcapi/pb (`make proto`).
//
// # Invariants
//
//   - A ProduceResponse without an error is sent only after its record is
//     durable in the WAL (and on the replicas the cluster requires); the
//     answers come in the order of the requests, one each.
//   - A refused record (back-pressure, a bad field, an unknown stream)
//     gets an answer with an Error and the stream goes on; nothing of it
//     was appended. Authentication failures end the call
//     (Unauthenticated), as do protocol errors, and so does the expiry
//     of the token a call authenticated with (auth.ErrExpired).
//   - Fetch reads through the cloud's one tables.Reader: offset N is the
//     Kafka offset N, Pulsar entry N and the HTTP API's offset N, and
//     nothing at or past the committed mark is served.
//   - Bounded: one message is at most max_record_bytes (plus headers), at
//     most 8 MiB of a Produce call is decoded ahead of the WAL, and
//     max_streams calls run at once (ResourceExhausted beyond). HTTP/2
//     flow control holds a Fetch whose client does not read: the server
//     holds one response for it.
//
// # Outline
//
// auth.go authenticates each request in an HTTP middleware (Basic,
// Bearer or a verified client certificate, as package auth decides for
// the HTTP API) and authorizes per stream in the handlers; produce.go
// receives on one goroutine and appends runs of queued records (one WAL
// group commit each, internal/batch) on the handler's; fetch.go streams
// batches of a partition, tailing it when asked.
package grpcapi
