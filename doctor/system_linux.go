//go:build linux

package doctor

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/netns"
)

// hostSystem is the running host's System.
type hostSystem struct{}

var _ System = hostSystem{}

func (hostSystem) InNetns(name string, fn func() error) error { return netns.Do(name, fn) }

// DCB asks the kernel's dcbnl for the interface's IEEE DCB state.
func (hostSystem) DCB(ifname string) (DCB, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return DCB{}, fmt.Errorf("dcbnl %s: netlink socket: %w", ifname, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return DCB{}, fmt.Errorf("dcbnl %s: bind: %w", ifname, err)
	}
	tv := unix.Timeval{Sec: 2}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return DCB{}, fmt.Errorf("dcbnl %s: %w", ifname, err)
	}
	if err := unix.Sendto(fd, dcbRequest(ifname, 1), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return DCB{}, fmt.Errorf("dcbnl %s: send: %w", ifname, err)
	}
	buf := make([]byte, 1<<16)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return DCB{}, fmt.Errorf("dcbnl %s: receive: %w", ifname, err)
	}
	d, err := parseDCBReply(buf[:n])
	if err != nil {
		return DCB{}, fmt.Errorf("%s: %w", ifname, err)
	}
	return d, nil
}

// Driver asks ethtool (ETHTOOL_GDRVINFO) for the interface's driver.
func (hostSystem) Driver(ifname string) (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("ethtool %s: %w", ifname, err)
	}
	defer unix.Close(fd)
	info, err := unix.IoctlGetEthtoolDrvinfo(fd, ifname)
	if err != nil {
		return "", fmt.Errorf("ethtool %s: driver: %w", ifname, err)
	}
	return unix.ByteSliceToString(info.Driver[:]), nil
}

// Addrs lists each interface's IP addresses.
func (hostSystem) Addrs() (map[string][]netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	out := map[string][]netip.Addr{}
	for _, ifc := range ifs {
		as, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range as {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				out[ifc.Name] = append(out[ifc.Name], pfx.Addr())
			}
		}
	}
	return out, nil
}
