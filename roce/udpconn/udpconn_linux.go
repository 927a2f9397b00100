//go:build linux

package udpconn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// The socket buffers asked for (see Listen).
const (
	rcvBuf = 8 << 20
	sndBuf = 4 << 20
)

// Conn is a RoCEv2 UDP socket.
type Conn struct {
	uc    *net.UDPConn
	rc    syscall.RawConn
	local netip.AddrPort
	v6    bool
	batch int
	stats Stats
	once  sync.Once
	// sockBusy says the socket has SO_BUSY_POLL (Options.BusyPoll).
	sockBusy bool

	rd batchState // used by ReadBatch only
	wr batchState // used by WriteBatch only
}

var (
	_ roce.PacketConn    = (*Conn)(nil)
	_ roce.ReadDeadliner = (*Conn)(nil)
)

// mmsghdr is struct mmsghdr.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
	_   [4]byte
}

// batchState is the system call's view of one batch.
type batchState struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	ctl   [][]byte
	hdr   [48]byte // the IP and UDP headers the kernel will write, for the ICRC

	// The system call, made once per batch through RawConn: a closure
	// built once, so a batch allocates nothing.
	call  func(fd uintptr) bool
	try   func(fd uintptr) bool // the same, never waiting in the poller (TryReadBatch)
	count int                   // messages offered
	done  int                   // messages moved
	errno syscall.Errno         // the call's error
}

const (
	ctlLen = 64
)

func (b *batchState) init(n int, sysno uintptr) {
	// Three iovecs a message: a write may gather headers, payload and
	// trailer (roce.Message.Payload); a read uses the first.
	*b = batchState{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, 3*n), names: make([]unix.RawSockaddrInet6, n), ctl: make([][]byte, n)}
	for i := range b.ctl {
		b.ctl[i] = make([]byte, ctlLen)
	}
	b.call = func(fd uintptr) bool {
		r, _, e := unix.Syscall6(sysno, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.count), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false // wait for the poller
		}
		b.done, b.errno = int(r), e
		return true
	}
	b.try = func(fd uintptr) bool {
		r, _, e := unix.Syscall6(sysno, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(b.count), unix.MSG_DONTWAIT, 0, 0)
		b.done, b.errno = int(r), e
		return true // never wait for the poller (TryReadBatch)
	}
}

// Listen opens the socket. A unicast conn sends multicast (to a group's
// address) from its own address with a TTL of 64: RoCE multicast may
// cross routers.
func Listen(opts Options) (*Conn, error) {
	a := opts.Addr
	if !a.Addr().IsValid() || a.Addr().IsUnspecified() {
		return nil, fmt.Errorf("udpconn: listen on %v: bind a specific IP address: the ICRC covers the source address", a)
	}
	group := a.Addr().Unmap().IsMulticast()
	if group && opts.Interface <= 0 {
		return nil, fmt.Errorf("udpconn: listen on group %v: no interface to join it on", a.Addr())
	}
	if a.Port() == 0 {
		a = netip.AddrPortFrom(a.Addr(), roce.Port)
	}
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	if opts.Batch <= 0 {
		opts.Batch = 64
	}
	if opts.Batch > MaxBatch {
		return nil, fmt.Errorf("udpconn: listen on %v: batch of %d messages: the kernel moves at most %d in one call", a, opts.Batch, MaxBatch)
	}
	network := "udp4"
	if a.Addr().Is6() {
		network = "udp6"
	}
	var uc *net.UDPConn
	var err error
	if group {
		uc, err = bindGroup(a)
	} else {
		uc, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(a))
	}
	if err != nil {
		return nil, fmt.Errorf("udpconn: %w", err)
	}
	c := &Conn{uc: uc, local: a, v6: a.Addr().Is6(), batch: opts.Batch}
	c.rd.init(opts.Batch, unix.SYS_RECVMMSG)
	c.wr.init(opts.Batch, unix.SYS_SENDMMSG)
	// Room for a window of full-size packets: the kernel's defaults hold
	// about fifty, and every drop costs a go-back-N. A kernel peer answers
	// a READ with all its packets at once (128 for 128 KiB at MTU 1024),
	// and several READs are outstanding: net.core.rmem_max (208 KiB by
	// default) caps SO_RCVBUF, so with CAP_NET_ADMIN the buffers are
	// forced (SO_RCVBUFFORCE), else they are what the cap allows.
	_ = uc.SetReadBuffer(rcvBuf)
	_ = uc.SetWriteBuffer(sndBuf)
	if c.rc, err = uc.SyscallConn(); err != nil {
		uc.Close()
		return nil, fmt.Errorf("udpconn: %w", err)
	}
	_ = c.rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sndBuf)
	})
	var serr error
	err = c.rc.Control(func(fd uintptr) {
		if c.v6 {
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 64),
				// RoCEv2 over IPv6 comes with UDP checksum 0 (the ICRC
				// covers it): rxe sends it so and its own socket takes it
				// (udp_sock_create6 without use_udp6_rx_checksums), as
				// the AF_XDP conn sends it. Linux drops it otherwise.
				unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1))
			if group {
				mreq := &unix.IPv6Mreq{Multiaddr: a.Addr().As16(), Interface: uint32(opts.Interface)}
				serr = errors.Join(serr, unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq))
			} else if opts.Interface > 0 {
				serr = errors.Join(serr, unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, opts.Interface))
			}
			return
		}
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1),
			// Don't fragment: Linux then sends IP ID 0 from an unconnected
			// socket, which the ICRC needs to know.
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO),
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 64))
		if group {
			mreq := &unix.IPMreqn{Multiaddr: a.Addr().Unmap().As4(), Ifindex: int32(opts.Interface)}
			serr = errors.Join(serr, unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq))
		} else {
			// Multicast leaves from the conn's own address and interface.
			mreq := &unix.IPMreqn{Address: a.Addr().As4()}
			serr = errors.Join(serr, unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_IF, mreq))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("udpconn: socket options: %w", err)
	}
	if opts.BusyPoll {
		_ = c.rc.Control(func(fd uintptr) {
			c.sockBusy = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BUSY_POLL, BusyPollMicros) == nil
		})
	}
	return c, nil
}

// bindGroup opens a UDP socket bound to the group's address itself (Go's
// net package would bind a multicast address's wildcard, which takes the
// port's unicast datagrams too), with SO_REUSEADDR.
func bindGroup(a netip.AddrPort) (*net.UDPConn, error) {
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16()})
	if a.Addr().Unmap().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().Unmap().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("socket for group %v: %w", a, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("group %v: SO_REUSEADDR: %w", a, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind group %v: %w", a, err)
	}
	f := os.NewFile(uintptr(fd), "udp "+a.String())
	defer f.Close() // FilePacketConn dups it
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("group %v: %w", a, err)
	}
	return pc.(*net.UDPConn), nil
}

// SocketBusyPoll reports whether the socket has SO_BUSY_POLL
// (Options.BusyPoll; the kernel refuses it without CAP_NET_ADMIN).
func (c *Conn) SocketBusyPoll() bool { return c.sockBusy }

// LocalAddr returns the bound address.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// Stats returns the conn's counters.
func (c *Conn) Stats() *Stats { return &c.stats }

// SetReadDeadline implements roce.ReadDeadliner: the socket's read
// deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// Close closes the socket; a blocked ReadBatch returns ErrConnClosed.
func (c *Conn) Close() error {
	var err error
	c.once.Do(func() { err = c.uc.Close() })
	return err
}

// ReadBatch reads up to len(msgs) packets, waiting for the first.
func (c *Conn) ReadBatch(msgs []roce.Message) (int, error) { return c.readBatch(msgs, true) }

// TryReadBatch reads up to len(msgs) packets that have arrived, without
// waiting: 0 and no error when there are none. It fails as ReadBatch does
// when the conn is closed or its read deadline passed.
func (c *Conn) TryReadBatch(msgs []roce.Message) (int, error) { return c.readBatch(msgs, false) }

func (c *Conn) readBatch(msgs []roce.Message, wait bool) (int, error) {
	b := &c.rd
	n := min(len(msgs), c.batch)
	if n == 0 {
		return 0, nil
	}
	for i := range n {
		buf := msgs[i].Buf[:cap(msgs[i].Buf)]
		if len(buf) == 0 {
			return 0, fmt.Errorf("udpconn: read into message %d without a buffer", i)
		}
		b.iovs[i] = unix.Iovec{Base: &buf[0]}
		b.iovs[i].SetLen(len(buf))
		h := &b.hdrs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.names[i])), Namelen: unix.SizeofSockaddrInet6,
			Iov: &b.iovs[i], Control: &b.ctl[i][0]}
		h.SetIovlen(1)
		h.SetControllen(ctlLen)
	}
	b.count = n
	var err error
	if wait {
		err = c.rc.Read(b.call)
	} else if err = c.rc.Read(b.try); err == nil && (b.errno == unix.EAGAIN || b.errno == unix.EINTR) {
		return 0, nil
	}
	got, errno := b.done, b.errno
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, roce.ErrConnClosed
		}
		return 0, fmt.Errorf("udpconn: recvmmsg: %w", err)
	}
	if errno != 0 {
		return 0, fmt.Errorf("udpconn: recvmmsg: %w", errno)
	}
	out := 0
	for i := range got {
		h := &b.hdrs[i]
		m := &msgs[i]
		m.Buf = m.Buf[:cap(m.Buf)]
		m.N = int(h.n)
		m.Addr = sockaddrToAddrPort(&b.names[i])
		m.ECN = parseECN(b.ctl[i][:h.hdr.Controllen]) & 3
		m.ICRCChecked = false
		c.stats.RxPackets.Add(1)
		if h.hdr.Flags&unix.MSG_TRUNC != 0 {
			c.stats.RxTruncated.Add(1)
			continue
		}
		if c.v6 {
			hl, err := roce.PutIPUDPHeaders(b.hdr[:], m.Addr, c.local, m.N, 0)
			var crc uint32
			if err == nil {
				crc, err = roce.ICRCWithHeaders(b.hdr[:hl], m.Buf[:m.N])
			}
			if err != nil || crc != binary.LittleEndian.Uint32(m.Buf[m.N-4:m.N]) {
				c.stats.RxBadICRC.Add(1)
				continue
			}
			m.ICRCChecked = true
		}
		if out != i {
			msgs[out], msgs[i] = msgs[i], msgs[out] // keep the dropped one's buffer in the batch
		}
		out++
	}
	return out, nil
}

// WriteBatch fills each packet's ICRC and sends the batch. A message that
// cannot be sent (no RoCEv2 packet, a destination of the other address
// family) ends the batch: the ones before it are sent, and the error names
// it.
func (c *Conn) WriteBatch(msgs []roce.Message) (int, error) {
	b := &c.wr
	sent := 0
	for sent < len(msgs) {
		n := min(len(msgs)-sent, c.batch)
		var bad error
		for i := range n {
			if err := c.prepareWrite(i, &msgs[sent+i]); err != nil {
				n, bad = i, fmt.Errorf("udpconn: message %d: %w", sent+i, err)
				break
			}
		}
		if n > 0 {
			b.count = n
			err := c.rc.Write(b.call)
			done, errno := b.done, b.errno
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return sent, roce.ErrConnClosed
				}
				return sent, fmt.Errorf("udpconn: sendmmsg: %w", err)
			}
			if errno != 0 {
				return sent, fmt.Errorf("udpconn: sendmmsg to %v: %w", msgs[sent].Addr, errno)
			}
			c.stats.TxPackets.Add(uint64(done))
			sent += done
			if done < n {
				continue // the rest of this batch again, the bad one last
			}
		}
		if bad != nil {
			return sent, bad
		}
	}
	return sent, nil
}

// prepareWrite fills the write batch's slot i with m: its ICRC, over the
// headers the kernel will write, its iovecs, address and ECN.
func (c *Conn) prepareWrite(i int, m *roce.Message) error {
	b := &c.wr
	if !m.Sendable() {
		return fmt.Errorf("%d bytes (headers %d, payload %d) are no RoCEv2 packet", m.N, m.Hdr, len(m.Payload))
	}
	hl, err := roce.PutIPUDPHeaders(b.hdr[:], c.local, m.Addr, m.Len(), m.ECN)
	if err != nil {
		return err
	}
	iov := b.iovs[3*i : 3*i+3]
	niov := 1
	var crc uint32
	if m.Payload != nil {
		crc, err = roce.ICRCWithHeadersGather(b.hdr[:hl], m.Buf[:m.Hdr], m.Payload, m.Buf[m.Hdr:m.N])
		iov[0] = unix.Iovec{Base: &m.Buf[0]}
		iov[0].SetLen(m.Hdr)
		if len(m.Payload) > 0 {
			iov[niov] = unix.Iovec{Base: &m.Payload[0]}
			iov[niov].SetLen(len(m.Payload))
			niov++
		}
		iov[niov] = unix.Iovec{Base: &m.Buf[m.Hdr]}
		iov[niov].SetLen(m.N - m.Hdr)
		niov++
	} else {
		crc, err = roce.ICRCWithHeaders(b.hdr[:hl], m.Buf[:m.N])
		iov[0] = unix.Iovec{Base: &m.Buf[0]}
		iov[0].SetLen(m.N)
	}
	if err != nil {
		return fmt.Errorf("ICRC: %w", err)
	}
	binary.LittleEndian.PutUint32(m.Buf[m.N-4:m.N], crc)
	nl := addrPortToSockaddr(&b.names[i], m.Addr, c.v6)
	h := &b.hdrs[i].hdr
	*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.names[i])), Namelen: nl, Iov: &iov[0]}
	h.SetIovlen(niov)
	if m.ECN != 0 {
		cl := putECN(b.ctl[i], m.ECN&3, c.v6)
		h.Control = &b.ctl[i][0]
		h.SetControllen(cl)
	}
	return nil
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(sa4.Port))
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port))
	}
	return netip.AddrPort{}
}

func addrPortToSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, v6 bool) uint32 {
	if !v6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: ntohs(ap.Port()), Addr: ap.Addr().Unmap().As4()}
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: ntohs(ap.Port()), Addr: ap.Addr().As16()}
	return unix.SizeofSockaddrInet6
}

// ntohs swaps a port between network and host order (both directions).
func ntohs(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return *(*uint16)(unsafe.Pointer(&b[0]))
}

// parseECN returns the traffic class / TOS byte from received ancillary data.
func parseECN(ctl []byte) uint8 {
	for len(ctl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(ctl) {
			return 0
		}
		data := ctl[unix.SizeofCmsghdr:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			return data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			return uint8(*(*int32)(unsafe.Pointer(&data[0])))
		}
		ctl = ctl[min(cmsgAlign(l), len(ctl)):]
	}
	return 0
}

// putECN writes an IP_TOS (IPv4) or IPV6_TCLASS (IPv6) control message.
func putECN(ctl []byte, ecn uint8, v6 bool) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	if v6 {
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	h.SetLen(unix.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&ctl[unix.SizeofCmsghdr])) = int32(ecn)
	return unix.CmsgSpace(4)
}

func cmsgAlign(n int) int { return (n + 7) &^ 7 }
