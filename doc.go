// Package tributary holds the domain types every layer of Tributary shares:
// the accepted message ([Record], [Header]), stream names ([ParseStream]),
// and the reasons an edge node refuses to accept records ([Reason], with
// one sentinel error each), and the one contract of the write path
// ([Appender], [Write]) that every front door submits to.
//
// It imports nothing of the project, so the front doors (mqtt, kafka,
// pulsar), the log (wal), the tables and the cloud side can all speak of the
// same record without knowing each other. Protocol packages map a refusal's
// reason to their own error code (see [ReasonOf]); metrics and logs name it.
package tributary
