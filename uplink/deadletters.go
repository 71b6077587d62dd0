package uplink

import (
	"time"

	"github.com/tributary-io/tributary/tables"
)

// MaxDeadLetterNotes is how many of the latest dead letters Stats keeps.
const MaxDeadLetterNotes = 10

// DeadLetterLogEvery is the least time between two log lines about one
// stream's dead letters; the next line counts those it did not name.
const DeadLetterLogEvery = 10 * time.Second

// DeadLetterNote is a committed dead letter as the console and the log
// show it: where it is and why its payload has no typed columns.
type DeadLetterNote struct {
	Stream    string    `json:"stream"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Error     string    `json:"error"`
	At        time.Time `json:"at"`
}

// dlqLog is the rate limit of one stream's dead-letter log lines.
type dlqLog struct {
	last    time.Time
	skipped int64
}

// noteDeadLetters records the dead letters of a committed batch (the
// latest notes) and logs the first of them, at most once per
// DeadLetterLogEvery per stream.
func (u *Uplink) noteDeadLetters(stream string, dls []tables.DeadLetter, now time.Time) {
	if len(dls) == 0 {
		return
	}
	u.mu.Lock()
	for _, d := range dls {
		u.notes = append(u.notes, DeadLetterNote{Stream: stream, Partition: d.Record.Partition, Offset: d.Record.Offset, Error: d.Error, At: now})
	}
	if over := len(u.notes) - MaxDeadLetterNotes; over > 0 {
		u.notes = append(u.notes[:0], u.notes[over:]...)
	}
	if u.dlqLogs == nil {
		u.dlqLogs = map[string]*dlqLog{}
	}
	l := u.dlqLogs[stream]
	if l == nil {
		l = &dlqLog{}
		u.dlqLogs[stream] = l
	}
	if !l.last.IsZero() && now.Sub(l.last) < DeadLetterLogEvery {
		l.skipped += int64(len(dls))
		u.mu.Unlock()
		return
	}
	skipped := l.skipped + int64(len(dls)) - 1
	l.last, l.skipped = now, 0
	u.mu.Unlock()
	d := dls[0]
	u.cfg.Logger.Warn("dead letter: payload not typed, kept in the stream table and in its dead-letter table",
		"stream", stream, "partition", d.Record.Partition, "offset", d.Record.Offset, "reason", d.Error,
		"table", tables.DLQStream(stream), "more_not_logged", skipped)
}
