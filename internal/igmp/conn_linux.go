//go:build linux

package igmp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Conn hears every IGMP message on one interface and sends queries there:
// an AF_PACKET datagram socket (IPv4 packets, no link-layer header) bound
// to the interface, in all-multicast mode (a NIC's filter would drop
// reports to groups nobody on the host joined), filtered in the kernel to
// IP protocol 2. What the host itself sends is not read.
type Conn struct {
	f       *os.File
	rc      syscall.RawConn
	ifindex int
	proto   uint16 // ETH_P_IP or ETH_P_IPV6
}

// htons is the network byte order of an EtherType, as AF_PACKET takes it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// igmpFilter is the IPv4 socket's filter: a packet (the datagram
// socket's data starts at the IP header) whose protocol is IGMP, whole;
// else nothing.
var igmpFilter = []bpf.Instruction{
	bpf.LoadAbsolute{Off: 9, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: ProtocolIGMP, SkipFalse: 1},
	bpf.RetConstant{Val: 0xffff},
	bpf.RetConstant{Val: 0},
}

// mldFilter is the IPv6 socket's: a packet whose first header is
// Hop-by-Hop options (MLD always carries the Router Alert) and whose next
// one is ICMPv6, of an MLD type.
var mldFilter = []bpf.Instruction{
	bpf.LoadAbsolute{Off: ipv6Next, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoHopByHop, SkipFalse: 8},
	bpf.LoadAbsolute{Off: ipv6Len, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 6},
	bpf.LoadAbsolute{Off: ipv6Len + 1, Size: 1}, // Hdr Ext Len, 8-byte units beyond the first 8
	bpf.ALUOpConstant{Op: bpf.ALUOpMul, Val: 8},
	bpf.TAX{},
	bpf.LoadIndirect{Off: ipv6Len + 8, Size: 1}, // the ICMPv6 type
	bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: mldQuery, SkipFalse: 1},
	bpf.RetConstant{Val: 0xffff}, // 130 and up: MLD's and a few others, which parsing refuses
	bpf.RetConstant{Val: 0},
}

// Listen opens a Conn on the interface named ifname, in the caller's
// network namespace, for IGMP (ipv6 false) or MLD (true). It needs
// CAP_NET_RAW.
func Listen(ifname string, ipv6 bool) (*Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("igmp: listen on %s: %w", ifname, err)
	}
	filterProg, proto := igmpFilter, uint16(unix.ETH_P_IP)
	if ipv6 {
		filterProg, proto = mldFilter, unix.ETH_P_IPV6
	}
	prog, err := bpf.Assemble(filterProg)
	if err != nil {
		return nil, fmt.Errorf("igmp: listen on %s: assemble the filter: %w", ifname, err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	// Protocol 0 until bound: no packet is queued before the filter is on.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("igmp: listen on %s: socket(AF_PACKET): %w", ifname, err)
	}
	fail := func(what string, err error) (*Conn, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("igmp: listen on %s: %s: %w", ifname, what, err)
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		return fail("attach the filter", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	mreq := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_ALLMULTI}
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
		return fail("all-multicast membership", err)
	}
	f := os.NewFile(uintptr(fd), "igmp:"+ifname)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("igmp: listen on %s: %w", ifname, err)
	}
	return &Conn{f: f, rc: rc, ifindex: ifi.Index, proto: proto}, nil
}

// Read reads the next IGMP packet that arrived on the interface (the IPv4
// header and the message) into b; it blocks until one does or the Conn
// is closed.
func (c *Conn) Read(b []byte) (int, error) {
	for {
		var n int
		var from unix.Sockaddr
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), b, 0)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return 0, fmt.Errorf("igmp: read: %w", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // the host's own
		}
		return n, nil
	}
}

// WriteTo sends the IP packet pkt to dst, a multicast group of the Conn's
// family, on the interface (to the group's Ethernet address: 01:00:5e and
// its low 23 bits, 33:33 and its low 32 bits).
func (c *Conn) WriteTo(pkt []byte, dst netip.Addr) error {
	if !dst.IsMulticast() || dst.Is6() != (c.proto == unix.ETH_P_IPV6) {
		return fmt.Errorf("igmp: send to %v: not a multicast group of the socket's family", dst)
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(c.proto), Ifindex: c.ifindex, Halen: 6}
	if a := dst.As16(); dst.Is6() {
		to.Addr = [8]byte{0x33, 0x33, a[12], a[13], a[14], a[15]}
	} else {
		a := dst.As4()
		to.Addr = [8]byte{0x01, 0x00, 0x5e, a[1] & 0x7f, a[2], a[3]}
	}
	var werr error
	err := c.rc.Write(func(fd uintptr) bool {
		werr = unix.Sendto(int(fd), pkt, 0, to)
		return !errors.Is(werr, unix.EAGAIN)
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("igmp: send to %v: %w", dst, err)
	}
	return nil
}

// Close closes the socket; a Read blocked on it returns. It may be called
// more than once.
func (c *Conn) Close() error {
	if err := c.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("igmp: close: %w", err)
	}
	return nil
}
