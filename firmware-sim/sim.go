package firmwaresim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
)

// QoS0 requests QoS 0 (at most once) in Config.QoS. It exists because the
// zero value of Config.QoS means "the default", which is QoS 1.
const QoS0 byte = 0x80

// Config describes a simulated fleet. Zero fields take the documented
// defaults.
type Config struct {
	// Broker is the MQTT server URL: tcp://host:port (also mqtt://),
	// ws://host:port/path or wss://, tls://. A bare host:port means tcp.
	// Default tcp://127.0.0.1:1883.
	Broker string
	// TLS configures tls:// (ssl://, mqtts://) and wss:// brokers; nil =
	// the system's roots.
	TLS *tls.Config
	// Devices is the number of simulated devices, one MQTT connection
	// each. Default 10.
	Devices int
	// Rate is messages per second per device (open loop: sends are
	// scheduled at fixed intervals, independent of acks). 0 = as fast as
	// possible (closed loop, limited by InFlight).
	Rate float64
	// InFlight is the maximum number of unacknowledged QoS 1/2 publishes
	// per device. Default 1. With InFlight > 1 the messages of a device
	// may reach the broker slightly out of seq order.
	InFlight int
	// QoS is the publish QoS: 1 or 2, or QoS0 for QoS 0. Zero = 1.
	QoS byte
	// TopicPattern is the topic of each device; {device} is replaced by
	// the device index and {line} by index % Lines.
	// Default "factory/line{line}/device{device}/telemetry".
	TopicPattern string
	// Lines is the number of production lines the devices are spread
	// over. Default 4.
	Lines int
	// PayloadSize 0 publishes realistic JSON telemetry; > 0 publishes
	// payloads of exactly that many bytes (see package doc).
	PayloadSize int
	// Duration stops publishing after this long (measured from the moment
	// every device is connected). 0 = until ctx is cancelled or Messages
	// is reached.
	Duration time.Duration
	// Messages is the number of messages per device. 0 = unlimited.
	Messages int
	// ClientIDPrefix: device i connects as "<prefix>-<i>". Default "sim".
	ClientIDPrefix string
	// MQTTVersion must be 5 (or 0 for the default, 5): paho.golang speaks
	// MQTT 5 only.
	MQTTVersion int
	// UserProperties attaches the MQTT 5 user properties device, line and
	// seq to every publish.
	UserProperties bool
	// BurstEvery and BurstSize: with Rate > 0, each device additionally
	// sends BurstSize messages back to back every BurstEvery (first burst
	// at a random offset), like a device flushing a buffer after a
	// network blip. Ignored when either is zero or Rate is 0.
	BurstEvery time.Duration
	BurstSize  int
	// AnomalyProb is the probability per realistic reading that an anomaly
	// episode (a few readings of high vibration and temperature, status
	// "warn"/"alarm") starts. 0 = default 0.002; negative = never.
	AnomalyProb float64
	// Seed makes payloads and schedules reproducible (0 is a valid seed).
	Seed int64
	// Username and Password are sent in CONNECT when Username is set
	// ({device} in Username is replaced by the device index, so each
	// device can log in as itself). Default none (anonymous).
	Username string
	Password string

	// ConnectTimeout bounds the initial connection of the whole fleet;
	// Run fails if any device is not connected by then. Default 10s.
	ConnectTimeout time.Duration
	// AckTimeout fails a QoS 1/2 publish not acknowledged within it (it is
	// then retried). Default 30s.
	AckTimeout time.Duration
	// DrainTimeout is how long publishes in flight at the stop get to be
	// acknowledged before they count as Failed. Default 5s.
	DrainTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the exponential reconnect backoff
	// (full jitter in the upper half). Defaults 100ms and 10s.
	ReconnectMin, ReconnectMax time.Duration
	// KeepAlive in seconds. Default 30.
	KeepAlive uint16

	// Progress, when set, is called every ProgressEvery (default 1s) with
	// a snapshot of the running totals.
	Progress      func(Summary)
	ProgressEvery time.Duration

	// Logger receives connection events at Debug level and fleet events at
	// Info. Default: discard.
	Logger *slog.Logger
}

func (c *Config) normalise() error {
	if c.Broker == "" {
		c.Broker = "tcp://127.0.0.1:1883"
	}
	if c.Devices == 0 {
		c.Devices = 10
	}
	if c.InFlight == 0 {
		c.InFlight = 1
	}
	switch c.QoS {
	case 0:
		c.QoS = 1
	case QoS0:
		c.QoS = 0
	case 1, 2:
	default:
		return fmt.Errorf("firmwaresim: invalid QoS %d", c.QoS)
	}
	if c.TopicPattern == "" {
		c.TopicPattern = "factory/line{line}/device{device}/telemetry"
	}
	if c.Lines == 0 {
		c.Lines = 4
	}
	if c.ClientIDPrefix == "" {
		c.ClientIDPrefix = "sim"
	}
	if c.MQTTVersion == 0 {
		c.MQTTVersion = 5
	}
	if c.AnomalyProb == 0 {
		c.AnomalyProb = 0.002
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 30 * time.Second
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 5 * time.Second
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 100 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = 10 * time.Second
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 30
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.MQTTVersion != 5:
		return fmt.Errorf("firmwaresim: MQTT version %d not supported (paho.golang speaks MQTT 5 only)", c.MQTTVersion)
	case c.Devices < 0, c.InFlight < 0, c.Lines < 0, c.Messages < 0, c.PayloadSize < 0, c.BurstSize < 0:
		return errors.New("firmwaresim: negative Devices, InFlight, Lines, Messages, PayloadSize or BurstSize")
	case c.Rate < 0:
		return errors.New("firmwaresim: negative Rate")
	case c.ReconnectMax < c.ReconnectMin:
		return errors.New("firmwaresim: ReconnectMax < ReconnectMin")
	}
	return nil
}

// brokerURL parses Config.Broker.
func brokerURL(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "tcp://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("firmwaresim: broker %q: %w", s, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "tcp", "mqtt", "ws", "wss", "tls", "ssl", "mqtts":
	default:
		return nil, fmt.Errorf("firmwaresim: broker %q: unsupported scheme %q", s, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("firmwaresim: broker %q: no host", s)
	}
	return u, nil
}

// Summary is the outcome of a run.
type Summary struct {
	Devices int  `json:"devices"`
	QoS     byte `json:"qos"`
	// Sent counts publish attempts written (or being written) to a
	// connection, retries included. Acked counts messages acknowledged by
	// the broker (PUBACK, PUBCOMP; for QoS 0, written without error);
	// each seq is acked at most once. Failed counts attempts that ended
	// without an ack (connection lost, ack timeout, error reason code,
	// or still unacked when the drain timeout expired). At the end
	// Sent == Acked + Failed.
	Sent       int64 `json:"sent"`
	Acked      int64 `json:"acked"`
	Failed     int64 `json:"failed"`
	Reconnects int64 `json:"reconnects"`
	// Elapsed runs from the moment every device is connected until the
	// last publish completed (or was abandoned).
	Elapsed time.Duration `json:"elapsed_ns"`
	// Latency is the service time of acked QoS 1/2 publishes: from the
	// Publish call (message handed to the client, packet about to be
	// written) to PUBACK (QoS 1) or PUBCOMP (QoS 2). Empty for QoS 0.
	Latency Latency `json:"latency"`
	// Response measures the same acks from the moment each message was
	// due by the schedule (Rate > 0) or handed to the device's in-flight
	// window (Rate 0). It includes waiting for a free in-flight slot, so
	// it does not suffer from coordinated omission when the broker falls
	// behind the offered rate.
	Response Latency `json:"response"`
	// TargetRate is the offered fleet-wide rate (Devices × Rate; 0 = max).
	TargetRate float64 `json:"target_rate"`
}

// MsgsPerSec returns acked messages per second over Elapsed.
func (s Summary) MsgsPerSec() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Acked) / s.Elapsed.Seconds()
}

// String renders the summary as a few human-readable lines.
func (s Summary) String() string {
	var b strings.Builder
	target := "max"
	if s.TargetRate > 0 {
		target = strconv.FormatFloat(s.TargetRate, 'f', -1, 64) + " msg/s"
	}
	fmt.Fprintf(&b, "devices:    %d (QoS %d, target %s)\n", s.Devices, s.QoS, target)
	fmt.Fprintf(&b, "messages:   sent %d, acked %d, failed %d, reconnects %d\n", s.Sent, s.Acked, s.Failed, s.Reconnects)
	fmt.Fprintf(&b, "throughput: %.1f msg/s acked over %s\n", s.MsgsPerSec(), s.Elapsed.Round(time.Millisecond))
	if s.QoS > 0 {
		fmt.Fprintf(&b, "latency:    %s\n", s.Latency)
		fmt.Fprintf(&b, "response:   %s\n", s.Response)
	}
	return b.String()
}

// fleet is the shared state of one Run.
type fleet struct {
	cfg        Config
	log        *slog.Logger
	sent       atomic.Int64
	acked      atomic.Int64
	failed     atomic.Int64
	reconnects atomic.Int64
	latency    Histogram
	response   Histogram
	start      time.Time
	stop       chan struct{} // closed: publish no new messages, retry nothing
	base       context.Context
}

func (f *fleet) snapshot(elapsed time.Duration) Summary {
	return Summary{
		Devices:    f.cfg.Devices,
		QoS:        f.cfg.QoS,
		Sent:       f.sent.Load(),
		Acked:      f.acked.Load(),
		Failed:     f.failed.Load(),
		Reconnects: f.reconnects.Load(),
		Elapsed:    elapsed,
		Latency:    f.latency.Summary(),
		Response:   f.response.Summary(),
		TargetRate: f.cfg.Rate * float64(f.cfg.Devices),
	}
}

func (f *fleet) stopped() bool {
	select {
	case <-f.stop:
		return true
	default:
		return false
	}
}

// Run simulates the fleet until Messages per device are acked, Duration has
// passed or ctx is cancelled, whichever comes first, and returns the totals.
// On stop, publishes in flight get DrainTimeout to be acknowledged. Run
// returns an error only for an invalid Config, when the fleet could not
// connect within ConnectTimeout, or when ctx ends before it connected.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if err := cfg.normalise(); err != nil {
		return Summary{}, err
	}
	u, err := brokerURL(cfg.Broker)
	if err != nil {
		return Summary{}, err
	}
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	f := &fleet{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), base: base}

	// Connect the fleet.
	cmCtx, cancelCM := context.WithCancel(context.Background())
	defer cancelCM()
	devices := make([]*device, cfg.Devices)
	for i := range devices {
		devices[i] = newDevice(f, i)
		if err := devices[i].connect(cmCtx, u); err != nil {
			disconnectAll(devices[:i])
			return Summary{}, err
		}
	}
	connectCtx, cancelConnect := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancelConnect()
	for _, d := range devices {
		select {
		case <-d.firstUp:
		case <-connectCtx.Done():
			n := 0
			for _, d := range devices {
				select {
				case <-d.firstUp:
					n++
				default:
				}
			}
			disconnectAll(devices)
			if ctx.Err() != nil {
				return Summary{}, ctx.Err()
			}
			return Summary{}, fmt.Errorf("firmwaresim: only %d of %d devices connected to %s within %s",
				n, cfg.Devices, cfg.Broker, cfg.ConnectTimeout)
		}
	}
	f.log.Info("fleet connected", "devices", cfg.Devices, "broker", cfg.Broker)

	// Publish.
	f.start = time.Now()
	var wg sync.WaitGroup
	for _, d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.run()
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	var durationC <-chan time.Time
	if cfg.Duration > 0 {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		durationC = t.C
	}
	var progressC <-chan time.Time
	if cfg.Progress != nil {
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		progressC = t.C
	}
	stopOnce := func(why string) {
		if !f.stopped() {
			f.log.Info("fleet stopping", "reason", why)
			close(f.stop)
			time.AfterFunc(cfg.DrainTimeout, cancelBase)
		}
	}
loop:
	for {
		select {
		case <-finished:
			break loop
		case <-durationC:
			stopOnce("duration")
		case <-ctx.Done():
			stopOnce("cancelled")
		case <-progressC:
			cfg.Progress(f.snapshot(time.Since(f.start)))
		}
	}
	elapsed := time.Since(f.start)
	disconnectAll(devices)
	sum := f.snapshot(elapsed)
	f.log.Info("fleet done", "sent", sum.Sent, "acked", sum.Acked, "failed", sum.Failed,
		"reconnects", sum.Reconnects, "elapsed", elapsed)
	return sum, nil
}

func disconnectAll(devices []*device) {
	var wg sync.WaitGroup
	for _, d := range devices {
		if d.cm == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = d.cm.Disconnect(ctx)
		}()
	}
	wg.Wait()
}

// device is one simulated device and its MQTT connection.
type device struct {
	f        *fleet
	idx      int
	name     string // "device7"
	line     string // "line3"
	topic    string
	clientID string
	cm       *autopaho.ConnectionManager

	mu         sync.Mutex
	up         bool
	upCh       chan struct{} // closed while the connection is up
	connCtx    context.Context
	connCancel context.CancelFunc
	ups        int
	firstUp    chan struct{}

	// Owned by the sender goroutine.
	rng    *rand.Rand
	sensor *sensor
	fill   filler
}

type job struct {
	seq      uint64
	due      time.Time
	payload  []byte
	userProp paho.UserProperties
}

func newDevice(f *fleet, i int) *device {
	cfg := &f.cfg
	line := 0
	if cfg.Lines > 0 {
		line = i % cfg.Lines
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i)))
	d := &device{
		f:        f,
		idx:      i,
		name:     "device" + strconv.Itoa(i),
		line:     "line" + strconv.Itoa(line),
		topic:    expandTopic(cfg.TopicPattern, i, line),
		clientID: cfg.ClientIDPrefix + "-" + strconv.Itoa(i),
		upCh:     make(chan struct{}),
		firstUp:  make(chan struct{}),
		rng:      rng,
	}
	if cfg.PayloadSize > 0 {
		d.fill = newFiller(rng, cfg.PayloadSize)
	} else {
		prob := cfg.AnomalyProb
		if prob < 0 {
			prob = 0
		}
		d.sensor = newSensor(rng, prob)
	}
	return d
}

func (d *device) connect(ctx context.Context, u *url.URL) error {
	cfg := &d.f.cfg
	backoffMin, backoffMax := cfg.ReconnectMin, cfg.ReconnectMax
	var brng = rand.New(rand.NewPCG(uint64(cfg.Seed)^0x9e3779b97f4a7c15, uint64(d.idx)))
	var brngMu sync.Mutex
	cc := autopaho.ClientConfig{
		ServerUrls: []*url.URL{u},
		TlsCfg:     cfg.TLS,
		KeepAlive:  cfg.KeepAlive,
		// Session Expiry 0 and Clean Start on every connection: a
		// reconnect starts a fresh session and the simulator itself
		// retries whatever was not acknowledged.
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         0,
		ConnectPacketBuilder: func(c *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			c.CleanStart = true
			if cfg.Username != "" {
				c.Username, c.UsernameFlag = strings.ReplaceAll(cfg.Username, "{device}", strconv.Itoa(d.idx)), true
				c.Password, c.PasswordFlag = []byte(cfg.Password), true
			}
			return c, nil
		},
		ReconnectBackoff: func(attempt int) time.Duration {
			if attempt <= 0 {
				return 0
			}
			delay := backoffMax
			if attempt < 40 {
				delay = min(backoffMax, backoffMin<<(attempt-1))
			}
			brngMu.Lock()
			j := brng.Int64N(int64(delay)/2 + 1)
			brngMu.Unlock()
			return delay/2 + time.Duration(j)
		},
		ConnectTimeout: cfg.ConnectTimeout,
		OnConnectionUp: func(_ *autopaho.ConnectionManager, _ *paho.Connack) {
			d.mu.Lock()
			d.ups++
			first := d.ups == 1
			d.up = true
			d.connCtx, d.connCancel = context.WithCancel(d.f.base)
			close(d.upCh)
			d.mu.Unlock()
			if first {
				close(d.firstUp)
			} else {
				d.f.reconnects.Add(1)
				d.f.log.Debug("device reconnected", "client_id", d.clientID)
			}
		},
		OnConnectionDown: func() bool {
			d.mu.Lock()
			if d.up {
				d.up = false
				d.connCancel()
				d.upCh = make(chan struct{})
			}
			d.mu.Unlock()
			d.f.log.Debug("device connection lost", "client_id", d.clientID)
			return true
		},
		OnConnectError: func(err error) {
			d.f.log.Debug("device connect failed", "client_id", d.clientID, "err", err)
		},
		ClientConfig: paho.ClientConfig{
			ClientID:      d.clientID,
			PacketTimeout: cfg.AckTimeout,
		},
	}
	cm, err := autopaho.NewConnection(ctx, cc)
	if err != nil {
		return fmt.Errorf("firmwaresim: %s: %w", d.clientID, err)
	}
	d.cm = cm
	return nil
}

// run drives the device: a sender goroutine produces messages on the
// schedule, InFlight workers publish them.
func (d *device) run() {
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range d.f.cfg.InFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d.publish(j)
			}
		}()
	}
	d.send(jobs)
	wg.Wait()
}

// send produces this device's messages in seq order until Messages or stop.
func (d *device) send(jobs chan<- job) {
	defer close(jobs)
	cfg := &d.f.cfg
	start := d.f.start
	var interval time.Duration
	var next, burstNext, burstDue time.Time
	burstLeft := 0
	bursts := cfg.Rate > 0 && cfg.BurstEvery > 0 && cfg.BurstSize > 0
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
		if interval <= 0 {
			interval = 1
		}
		// Stagger devices over one interval so they do not fire in step.
		next = start.Add(time.Duration(d.rng.Int64N(int64(interval))))
		if bursts {
			burstNext = start.Add(time.Duration(d.rng.Int64N(int64(cfg.BurstEvery))))
		}
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	for seq := uint64(1); cfg.Messages == 0 || seq <= uint64(cfg.Messages); seq++ {
		var due time.Time
		switch {
		case burstLeft > 0:
			burstLeft--
			due = burstDue
		case cfg.Rate > 0:
			at := next
			isBurst := bursts && burstNext.Before(next)
			if isBurst {
				at = burstNext
			}
			if wait := time.Until(at); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-d.f.stop:
					return
				}
			}
			if isBurst {
				burstDue = burstNext
				burstNext = burstNext.Add(cfg.BurstEvery)
				burstLeft = cfg.BurstSize - 1
				due = burstDue
			} else {
				due = next
				next = next.Add(interval)
			}
		default:
			due = time.Now()
		}
		j := d.makeJob(seq, due)
		select {
		case jobs <- j:
		case <-d.f.stop:
			return
		}
	}
}

func (d *device) makeJob(seq uint64, due time.Time) job {
	cfg := &d.f.cfg
	now := time.Now()
	var payload []byte
	if cfg.PayloadSize > 0 {
		payload = appendFixed(make([]byte, 0, cfg.PayloadSize+32), cfg.PayloadSize, d.name, seq, now, d.fill)
	} else {
		payload = appendTelemetry(make([]byte, 0, 192), d.name, d.line, seq, now, d.sensor.next())
	}
	j := job{seq: seq, due: due, payload: payload}
	if cfg.UserProperties {
		j.userProp = paho.UserProperties{
			{Key: "device", Value: d.name},
			{Key: "line", Value: d.line},
			{Key: "seq", Value: strconv.FormatUint(seq, 10)},
		}
	}
	return j
}

// waitUp returns the context of the current connection, waiting for one to
// come up; ok is false once the run is stopped or the drain has expired.
func (d *device) waitUp() (ctx context.Context, ok bool) {
	for {
		d.mu.Lock()
		up, ch, cctx := d.up, d.upCh, d.connCtx
		d.mu.Unlock()
		if up && cctx.Err() == nil {
			return cctx, true
		}
		select {
		case <-ch:
		case <-d.f.stop:
			return nil, false
		}
	}
}

// publish publishes one message, retrying it (same seq, same payload) after
// a failure until it is acked or the run stops.
func (d *device) publish(j job) {
	f := d.f
	backoff := 10 * time.Millisecond
	for {
		if f.stopped() {
			return
		}
		cctx, ok := d.waitUp()
		if !ok {
			return
		}
		p := &paho.Publish{QoS: f.cfg.QoS, Topic: d.topic, Payload: j.payload}
		if j.userProp != nil {
			p.Properties = &paho.PublishProperties{User: j.userProp}
		}
		f.sent.Add(1)
		t0 := time.Now()
		resp, err := d.cm.Publish(cctx, p)
		t1 := time.Now()
		if err == nil && resp != nil && resp.ReasonCode >= 0x80 {
			err = fmt.Errorf("reason code 0x%02x", resp.ReasonCode)
		}
		if err == nil {
			f.acked.Add(1)
			if f.cfg.QoS > 0 {
				f.latency.Record(t1.Sub(t0))
				f.response.Record(t1.Sub(j.due))
			}
			return
		}
		if errors.Is(err, autopaho.ConnectionDownError) || errors.Is(err, session.ErrNoConnection) {
			// Never reached the wire, so not an attempt. autopaho drops
			// the client a moment before OnConnectionDown runs; wait
			// briefly for the callback rather than spin.
			f.sent.Add(-1)
			select {
			case <-time.After(time.Millisecond):
			case <-cctx.Done():
			}
			continue
		}
		f.failed.Add(1)
		f.log.Debug("publish failed", "client_id", d.clientID, "seq", j.seq, "err", err)
		if cctx.Err() != nil {
			continue // connection lost: retry once it is back
		}
		// Broker refused or timed out: back off before retrying.
		select {
		case <-time.After(backoff):
		case <-f.stop:
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}
