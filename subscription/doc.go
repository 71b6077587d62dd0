// Package subscription is the subscriptions of the stream tables'
// consumers with acknowledgements: the Pulsar model (exclusive, shared,
// failover and key-shared subscriptions; a durable cursor per
// subscription of a mark-delete offset and individually acknowledged
// ranges; redelivery; permits as flow control), kept in one Manager per
// cloud server over a Source of committed rows and a CursorStore (the
// tributary_cursors table of the catalog database). The Pulsar server
// (package pulsar) and the gRPC API (package grpcapi) both serve it, so
// a subscription can be read over either protocol.
//
// It was package pulsar's own until the gRPC API needed the same
// subscriptions; it moved down here so that neither protocol package
// imports the other. Topic names are the protocol-neutral key of a
// subscription: persistent://<catalog>/<namespace>/<stream>-partition-N.
// Key_Shared hashes keys with Murmur3_32 into 65536 slots, as the broker
// does (murmur3.go).
package subscription
