package firmwaresim

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// sensor is the simulated physical state of one device: each quantity
// follows a mean-reverting random walk (Ornstein–Uhlenbeck) around a
// per-device set point, and every reading adds measurement noise on top.
type sensor struct {
	rng *rand.Rand

	tempBase, temp   float64
	humBase, hum     float64
	vibBase, vib     float64
	anomalyProb      float64
	anomalyRemaining int // readings left in the current anomaly episode
	anomalyTemp      float64
	anomalyVib       float64
}

func newSensor(rng *rand.Rand, anomalyProb float64) *sensor {
	s := &sensor{rng: rng, anomalyProb: anomalyProb}
	s.tempBase = 18 + 8*rng.Float64()
	s.humBase = 30 + 30*rng.Float64()
	s.vibBase = 0.5 + 2*rng.Float64()
	s.temp, s.hum, s.vib = s.tempBase, s.humBase, s.vibBase
	return s
}

type reading struct {
	temp, hum, vib float64
	status         string
}

// next advances the physical state by one step and returns a reading.
func (s *sensor) next() reading {
	const theta = 0.02 // pull towards the set point per step
	s.temp += theta*(s.tempBase-s.temp) + 0.05*s.rng.NormFloat64()
	s.hum += theta*(s.humBase-s.hum) + 0.1*s.rng.NormFloat64()
	s.vib += theta*(s.vibBase-s.vib) + 0.02*s.rng.NormFloat64()
	s.hum = clamp(s.hum, 0, 100)
	s.vib = math.Max(s.vib, 0)

	r := reading{
		temp:   s.temp + 0.03*s.rng.NormFloat64(),
		hum:    clamp(s.hum+0.2*s.rng.NormFloat64(), 0, 100),
		vib:    math.Max(s.vib+0.05*s.rng.NormFloat64(), 0),
		status: "ok",
	}
	if s.anomalyRemaining == 0 && s.anomalyProb > 0 && s.rng.Float64() < s.anomalyProb {
		// An episode: a bearing starts to rattle and the motor heats up
		// for a few readings.
		s.anomalyRemaining = 1 + s.rng.IntN(5)
		s.anomalyTemp = 5 + 10*s.rng.Float64()
		s.anomalyVib = 5 + 5*s.rng.Float64()
	}
	if s.anomalyRemaining > 0 {
		s.anomalyRemaining--
		r.temp += s.anomalyTemp
		r.vib *= s.anomalyVib
		r.status = "warn"
		if r.vib > 10 {
			r.status = "alarm"
		}
	}
	return r
}

func clamp(v, lo, hi float64) float64 { return math.Min(math.Max(v, lo), hi) }

// appendTelemetry appends the realistic JSON reading of a device.
func appendTelemetry(b []byte, device, line string, seq uint64, ts time.Time, r reading) []byte {
	b = append(b, `{"device":"`...)
	b = append(b, device...)
	b = append(b, `","line":"`...)
	b = append(b, line...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"ts":"`...)
	b = ts.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","temp_c":`...)
	b = strconv.AppendFloat(b, r.temp, 'f', 2, 64)
	b = append(b, `,"humidity":`...)
	b = strconv.AppendFloat(b, r.hum, 'f', 1, 64)
	b = append(b, `,"vibration_mm_s":`...)
	b = strconv.AppendFloat(b, r.vib, 'f', 2, 64)
	b = append(b, `,"status":"`...)
	b = append(b, r.status...)
	b = append(b, `"}`...)
	return b
}

// filler is per-device random printable text used to pad fixed-size
// payloads; each message takes a window at a different offset so that
// consecutive payloads differ and do not compress to nothing.
type filler []byte

const fillerAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func newFiller(rng *rand.Rand, size int) filler {
	f := make([]byte, size+4096)
	for i := range f {
		f[i] = fillerAlphabet[rng.IntN(len(fillerAlphabet))]
	}
	return f
}

func (f filler) window(seq uint64, n int) []byte {
	span := len(f) - n // ≥ 4096
	off := int((seq * 2654435761) % uint64(span))
	return f[off : off+n]
}

// appendFixed appends a payload of exactly size bytes. When size leaves
// room for it the payload is the JSON object
//
//	{"device":"device7","seq":123,"ts":"…","pad":"<filler>"}
//
// padded with random alphanumerics; below that (about 70 bytes) it is the
// decimal seq followed by filler, which is not JSON.
func appendFixed(b []byte, size int, device string, seq uint64, ts time.Time, f filler) []byte {
	start := len(b)
	b = append(b, `{"device":"`...)
	b = append(b, device...)
	b = append(b, `","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"ts":"`...)
	b = ts.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","pad":"`...)
	if pad := size - (len(b) - start) - 2; pad >= 0 {
		b = append(b, f.window(seq, pad)...)
		return append(b, `"}`...)
	}
	b = strconv.AppendUint(b[:start], seq, 10)
	if len(b)-start > size {
		return b[:start+size]
	}
	return append(b, f.window(seq, size-(len(b)-start))...)
}

// expandTopic substitutes {device} and {line} in a topic pattern.
func expandTopic(pattern string, device, line int) string {
	r := strings.NewReplacer("{device}", strconv.Itoa(device), "{line}", strconv.Itoa(line))
	return r.Replace(pattern)
}
