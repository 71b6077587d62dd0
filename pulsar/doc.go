// Package pulsar serves Pulsar consumers from the stream tables: the cloud
// server speaks the Pulsar binary protocol so that Pulsar applications read
// the very same Iceberg tables as Kafka consumers and query engines.
package pulsar
