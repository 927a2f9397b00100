package leg

import "golang.org/x/sys/unix"

// bindToDevice ties a socket to an interface (SO_BINDTODEVICE; needs
// CAP_NET_RAW).
func bindToDevice(fd int, ifname string) error {
	return unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname)
}
