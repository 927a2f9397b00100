//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxQueues is the most receive queues of an interface the classifier
// has AF_XDP sockets for (its xsks map).
const MaxQueues = 256

// ethtoolChannels is struct ethtool_channels (linux/ethtool.h).
type ethtoolChannels struct {
	Cmd                                         uint32
	MaxRx, MaxTx, MaxOther, MaxCombined         uint32
	RxCount, TxCount, OtherCount, CombinedCount uint32
}

// ifreqData is struct ifreq with ifr_data, the pointer SIOCETHTOOL reads.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the rest of the union
}

// RxQueues returns how many receive queues the interface uses, in the
// calling thread's network namespace: ethtool's channels, its receive and
// combined ones (ETHTOOL_GCHANNELS), the queues RSS spreads packets over
// and an AF_XDP socket may bind. A driver that reports no channels
// (EOPNOTSUPP) has one, and why says so.
func RxQueues(ifindex int) (n int, why string, err error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return 0, "", fmt.Errorf("xdp: receive queues of ifindex %d: %w", ifindex, err)
	}
	if len(ifi.Name) >= unix.IFNAMSIZ {
		return 0, "", fmt.Errorf("xdp: receive queues of %s: name too long", ifi.Name)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, "", fmt.Errorf("xdp: receive queues of %s: %w", ifi.Name, err)
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{Cmd: unix.ETHTOOL_GCHANNELS}
	var ifr ifreqData
	copy(ifr.name[:], ifi.Name)
	ifr.data = unsafe.Pointer(&ch)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ch)
	switch {
	case errors.Is(e, unix.EOPNOTSUPP):
		return 1, fmt.Sprintf("%s reports no channels (ethtool -l): one queue", ifi.Name), nil
	case e != 0:
		return 0, "", fmt.Errorf("xdp: receive queues of %s (ethtool -l): %w", ifi.Name, e)
	}
	n = int(ch.RxCount + ch.CombinedCount)
	if n < 1 {
		return 1, fmt.Sprintf("%s reports no receive channels (ethtool -l): one queue", ifi.Name), nil
	}
	return n, fmt.Sprintf("%s has %d receive queues (ethtool -l: %d rx, %d combined)", ifi.Name, n, ch.RxCount, ch.CombinedCount), nil
}

// OpenQueues opens an AF_XDP socket on each of the interface's receive
// queues 0 to n-1 (opts.Queue is ignored), in the calling thread's
// network namespace: the first registers the UMEM and binds as
// opts.Mode says, the others share it (ConnOptions.Share), each with
// rings of its own, taking its frames from opts.Frames, which must be
// set. With opts.Program each socket gets its queue's slot in the
// classifier, so a packet for an added QP reaches the socket of the queue
// it arrived on, whichever RSS chose. On an error it closes what it
// opened.
func OpenQueues(opts ConnOptions, n int) ([]*Conn, error) {
	switch {
	case n < 1 || n > MaxQueues:
		return nil, fmt.Errorf("xdp: open %d queues: want 1 to %d", n, MaxQueues)
	case n > 1 && opts.Frames == nil:
		return nil, fmt.Errorf("xdp: open %d queues: their shared UMEM needs Frames", n)
	}
	conns := make([]*Conn, 0, n)
	for q := range n {
		o := opts
		o.Queue = q
		if q > 0 {
			o.Share = conns[0]
		}
		c, err := NewConn(o)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("xdp: queue %d of %d: %w", q, n, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}
