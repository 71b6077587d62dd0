package mqtt

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// FuzzPacketDecode is the fast target (`make fuzz` runs it for FUZZTIME, a
// million executions by default) for what FuzzPacketHandlingServer sends:
// the bytes after a CONNECT of MQTT 5 or 3.1.1, read as the broker reads
// them (fixed header, remaining length up to the server's 64 KiB
// MaxPacketSize, then mochi's decoder and validator of that packet type),
// packet after packet until one fails, in process. A panic fails the
// target unless it is the known mochi SUBSCRIBE one that tcpListener
// recovers. Its corpus starts as a copy of FuzzPacketHandlingServer's.
func FuzzPacketDecode(f *testing.F) {
	f.Add(true, rawPublish(5, 1, 1, "fuzz/t", []byte("hello")))
	f.Add(false, rawPublish(4, 0, 0, "fuzz/t", []byte("hello")))
	f.Fuzz(func(t *testing.T, v5 bool, data []byte) {
		level := byte(4)
		if v5 {
			level = 5
		}
		r := bytes.NewReader(data)
		for {
			hb, err := r.ReadByte()
			if err != nil {
				return
			}
			pk := packets.Packet{ProtocolVersion: level}
			if err := pk.FixedHeader.Decode(hb); err != nil {
				return
			}
			if pk.FixedHeader.Remaining, _, err = packets.DecodeLength(r); err != nil || pk.FixedHeader.Remaining > 64<<10 {
				return
			}
			body := make([]byte, pk.FixedHeader.Remaining)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if !decodePacket(t, &pk, body) {
				return
			}
		}
	})
}

// decodePacket decodes and validates one packet body as mochi's client
// loop does; false if the broker would drop the connection.
func decodePacket(t *testing.T, pk *packets.Packet, body []byte) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if stack := string(debug.Stack()); !strings.Contains(stack, "packets.(*Packet).SubscribeDecode") {
				t.Fatalf("panic decoding packet type %d: %v\n%s", pk.FixedHeader.Type, p, stack)
			}
			ok = false
		}
	}()
	var err error
	var code packets.Code
	switch pk.FixedHeader.Type {
	case packets.Connect:
		if err = pk.ConnectDecode(body); err == nil {
			code = pk.ConnectValidate()
		}
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		if err = pk.PublishDecode(body); err == nil {
			code = pk.PublishValidate(1024)
		}
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Subscribe:
		if err = pk.SubscribeDecode(body); err == nil {
			code = pk.SubscribeValidate()
		}
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Unsubscribe:
		if err = pk.UnsubscribeDecode(body); err == nil {
			code = pk.UnsubscribeValidate()
		}
	case packets.Unsuback:
		err = pk.UnsubackDecode(body)
	case packets.Pingreq, packets.Pingresp:
	case packets.Auth:
		if err = pk.AuthDecode(body); err == nil {
			code = pk.AuthValidate()
		}
	default:
		return false
	}
	return err == nil && code.Code < 0x80
}

// FuzzPacketHandlingServer is the slow end-to-end target (`make fuzz`
// runs it for FUZZTIME_SLOW): it writes arbitrary bytes after a valid CONNECT (MQTT 5 or
// 3.1.1) into a raw TCP connection to a running server, then half-closes it.
// The server must close the connection within a bounded time, and a good
// client on its own connection must still get its QoS 1 publishes acked.
// Panics in mochi are recovered per connection (see tcpListener), so the
// fuzzer fails on any recovered panic other than the known SUBSCRIBE one.
// Seeds are in testdata/fuzz/FuzzPacketHandlingServer (valid publishes of each
// QoS, subscribe, QoS 2 with PUBREL, truncated frames, bad lengths, reserved
// topics).
func FuzzPacketHandlingServer(f *testing.F) {
	ts := startServer(f, func(c *Config) { c.MaxPacketSize = 64 << 10; c.WSAddr = "" })
	good := dialPaho(f, ts.tcp, "fuzz-good-client", nil)
	f.Add(true, rawPublish(5, 1, 1, "fuzz/t", []byte("hello")))
	f.Add(false, rawPublish(4, 0, 0, "fuzz/t", []byte("hello")))

	f.Fuzz(func(t *testing.T, v5 bool, data []byte) {
		panics := ts.Stats().Panics
		level := byte(4)
		if v5 {
			level = 5
		}
		conn, err := net.Dial("tcp", ts.tcp)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		msg := append(rawConnect(level, "fuzz"), data...)
		if _, err := conn.Write(msg); err != nil {
			t.Fatalf("write: %v", err)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, conn); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("server kept the connection open after EOF")
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := good.Publish(ctx, &paho.Publish{Topic: "fuzz/good", QoS: 1, Payload: []byte("alive")})
		if err != nil || resp.ReasonCode != 0 {
			t.Fatalf("good client after input: %v %+v", err, resp)
		}
		// Panics are recovered per connection (checked after the publish
		// above, by which time recovery has run); only the known mochi bug
		// may cause one, anything else is a new finding.
		if ts.Stats().Panics != panics {
			if stack, _ := ts.lastPanic.Load().(string); !strings.Contains(stack, "packets.(*Packet).SubscribeDecode") {
				t.Fatalf("new panic in the broker:\n%s", stack)
			}
		}
	})
}
