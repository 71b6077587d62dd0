//go:build !linux

package peer

import (
	"net"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: the
// heartbeat deadline and the write deadlines bound a dead link there.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }

func userTimeout(*net.TCPConn) (time.Duration, error) { return 0, nil }

const isLinux = false
