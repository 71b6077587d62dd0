package wal

import "time"

// grouper decides how long the committer holds a group back, from what
// the last groups showed of their writers; it does no I/O, so its rules
// are tested apart from bbolt (group_test.go).
//
// Closed-loop writers (an MQTT QoS 1 client with one publish in flight
// sends the next only after its PUBACK, which waits for the group's
// fsync) come back a round trip after their group commits. Committing the
// ops queued at that moment alone splits them into two half groups that
// take turns, each paying a whole commit: N writers get N records per two
// commits instead of N per one commit and one round trip. So the grouper
// learns the writers in flight — the ops of the group just committed plus
// those that queued during its commit, a decaying maximum over groups —
// and holds the next group until the just-acknowledged writers are back
// (seven eighths of them: stragglers join the group after), at most the
// mean commit duration (waiting pays while the writers' round trip is
// shorter than a commit) and never more than maxGatherWait, counted
// from the end of the commit. It does not wait:
//   - when the queue already holds as many ops as the writers seen in
//     flight (a flood: waiting adds nothing), nor for more writers than
//     the last group had, so a lone writer's target is its own arrival;
//   - past the wait: writers that are late (a round trip longer than a
//     commit, when waiting no longer pays) join the group after.
type grouper struct {
	writers int           // writers in flight: decaying maximum of a group's ops plus those queued when it ended
	last    int           // ops of the last group
	queued  int           // ops queued when it ended
	dur     time.Duration // commit duration, a moving average
	end     time.Time     // when the last group's commit ended
	late    int64         // groups that went at the deadline (tests)
	flood   bool          // the queue already held every writer seen
}

// maxGatherWait bounds how long a group is held back.
const maxGatherWait = 2 * time.Millisecond

// ended records a committed group of ops, queued ops waiting when its
// commit of dur ended.
func (gr *grouper) ended(ops, queued int, dur time.Duration) {
	gr.last, gr.queued, gr.end = ops, queued, time.Now()
	if gr.dur == 0 {
		gr.dur = dur
	}
	gr.dur += (dur - gr.dur) / 8
	known := gr.writers
	gr.writers = max(ops+queued, gr.writers-gr.writers/8)
	gr.flood = known > 0 && queued >= known
}

// target returns how many queued ops the next group waits for and for how
// long at most after the last commit ended; 0 means go at once.
func (gr *grouper) target() (int, time.Duration) {
	if gr.flood {
		return 0, 0
	}
	back := gr.last - gr.last/8
	if back <= 0 {
		return 0, 0
	}
	return gr.queued + back, min(gr.dur, maxGatherWait)
}
