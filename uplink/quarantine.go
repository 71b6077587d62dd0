package uplink

import (
	"github.com/tributary-io/tributary/uplink/quarantine"
)

// quarantineChunk bounds one WAL read while copying into the quarantine
// (package quarantine has the folder, its files and their format).
const quarantineChunk = 8 << 20

// Quarantine is the uplink's quarantine (Config.QuarantineDir), for the
// ownership book's drops (owner.Book.UseQuarantine); Stats counts what is
// kept there either way.
func (u *Uplink) Quarantine() *quarantine.Folder { return u.q }

// quarantine copies the records of (stream, partition) from the WAL into a
// new quarantine file and returns its path and record count ("" and 0 when
// the partition holds none). The caller counts them once it has dropped
// them from the WAL.
func (u *Uplink) quarantine(stream string, partition int32, from, next int64, reason string) (string, int64, error) {
	if next <= from {
		return "", 0, nil
	}
	qf, err := u.q.Create(stream, partition, from)
	if err != nil {
		return "", 0, err
	}
	for off := from; off < next; {
		recs, err := u.log.Read(stream, partition, off, 0, quarantineChunk)
		if err == nil && len(recs) > 0 {
			err = qf.Add(recs, reason)
		}
		if err != nil {
			qf.Abort()
			return "", 0, err
		}
		if len(recs) == 0 {
			break
		}
		off = recs[len(recs)-1].Offset + 1
	}
	path, err := qf.Finish()
	if err != nil {
		return "", 0, err
	}
	return path, qf.Records(), nil
}
