package peer

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT: data written but not acknowledged
// by the other end for d fails the connection (a pulled cable, where
// nothing answers and no reset comes).
func setUserTimeout(tc *net.TCPConn, d time.Duration) error {
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// userTimeout reads TCP_USER_TIMEOUT back (tests).
func userTimeout(tc *net.TCPConn) (time.Duration, error) {
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var serr error
	err = raw.Control(func(fd uintptr) {
		v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(v) * time.Millisecond, serr
}

const isLinux = true
