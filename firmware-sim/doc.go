// Package firmwaresim simulates a fleet of factory devices publishing
// telemetry over MQTT 5 (github.com/eclipse/paho.golang, autopaho). It is
// the demo fleet of `tributary dev`, the `tributary sim` subcommand (see
// Main) and the load generator of the broker benchmarks.
//
// # Fleet model
//
// Each of Config.Devices devices is one MQTT connection with client ID
// "<prefix>-<index>", Clean Start and Session Expiry 0, publishing to its
// own topic (default "factory/line{line}/device{device}/telemetry", where
// {line} = index % Lines). A device numbers its messages with seq 1, 2, 3,
// … strictly increasing and without gaps, so a consumer can check
// completeness per device.
//
// With Rate > 0 a device is open loop: message n is due at
// start + offset + n/Rate (offset is a random stagger within one interval),
// whatever the broker does; if the device falls behind it catches up as fast
// as its in-flight window allows. With Rate = 0 it is closed loop: the next
// message is published as soon as an in-flight slot (InFlight, default 1)
// frees. BurstEvery/BurstSize add periodic back-to-back bursts on top of the
// rate.
//
// When the connection drops, autopaho reconnects with exponential backoff
// and jitter (ReconnectMin doubling up to ReconnectMax, the delay drawn from
// the upper half). A QoS 1/2 publish that was in flight when the connection
// went away is counted as Failed and then retried with the same seq and the
// same payload once the device is connected again, so no seq is skipped;
// the broker may therefore receive a message twice (at-least-once). A
// publish refused with an error reason code or not acked within AckTimeout
// is likewise counted as Failed and retried after a short backoff. A
// publish is counted as Acked only when its PUBACK (QoS 1) or PUBCOMP
// (QoS 2) arrives with a success code; for QoS 0 Acked means written to the
// socket.
//
// # Payload
//
// With PayloadSize = 0 every message is a realistic reading:
//
//	{"device":"device7","line":"line3","seq":123,"ts":"2025-01-02T03:04:05.123456789Z",
//	 "temp_c":21.53,"humidity":40.1,"vibration_mm_s":1.21,"status":"ok"}
//
// Each quantity drifts as a mean-reverting random walk around a per-device
// set point, with measurement noise on every reading. Now and then
// (AnomalyProb per reading) an anomaly episode of one to five readings
// raises temperature and multiplies vibration; its status is "warn", or
// "alarm" above 10 mm/s. Everything is reproducible from Config.Seed except
// the timestamps.
//
// With PayloadSize = N > 0 every payload is exactly N bytes: the JSON object
// {"device":"device7","seq":123,"ts":"…","pad":"…"} padded with random
// alphanumerics (different in every message, so it does not compress away).
// Below about 70 bytes there is no room for that object, and the payload is
// the decimal seq followed by filler (not JSON).
//
// With UserProperties each publish also carries the MQTT 5 user properties
// device, line and seq.
//
// # As a load generator
//
// Summary.Latency is the service time of one publish as the device sees it:
// from the Publish call, which writes the PUBLISH packet, to the arrival of
// its PUBACK/PUBCOMP, so it covers the network round trip and the broker's
// work up to the ack (for Tributary: the WAL fsync). It is recorded for acked
// QoS 1/2 publishes in a log-bucketed histogram with nanosecond resolution
// and ±0.4 % precision (Histogram). Summary.Response measures the same acks
// from the moment each message was due, so when the broker cannot keep up
// with the offered rate the queueing shows there instead of vanishing
// (coordinated omission). MsgsPerSec is acked messages over Elapsed, which
// starts once the whole fleet is connected (connection setup is excluded)
// and ends when the last publish completes.
//
// For a throughput benchmark use Rate 0 with enough Devices × InFlight to
// keep the broker busy; for a latency benchmark use a fixed Rate well below
// saturation and read Response. The simulator and the broker share the
// machine, so compare brokers with the same fleet settings.
package firmwaresim
