//go:build linux

package udpconn

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
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
	closed   atomic.Bool
	log      *slog.Logger

	// The kernel's batching (Offload): gro is set at open; gso too, and
	// WriteBatch turns it off when a route refuses it (refuseGSO).
	gso atomic.Bool
	gro bool
	// Why either is off, for Offload.
	offMu        sync.Mutex
	noGSO, noGRO string // guarded by offMu

	rd    batchState // used by ReadBatch only
	groRd groReader  // used by ReadBatch only, with GRO

	// frames and arena lend what a GRO read brought (Options.Frames).
	// rdMu is held by a lent read, and by Close to drop the frames the
	// conn holds once no read uses them.
	frames FrameSource
	arena  []byte
	rdMu   sync.Mutex
	wr     batchState // used by WriteBatch only
}

var (
	_ roce.PacketConn    = (*Conn)(nil)
	_ roce.ReadDeadliner = (*Conn)(nil)
	_ roce.FrameLender   = (*Conn)(nil)
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

	segs []int // per header: the packets it carries (a write's GSO send)

	// The system call, made once per batch through RawConn: a closure
	// built once, so a batch allocates nothing. mmsg makes it (a test
	// puts a fake kernel in front of it).
	mmsg  func(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno)
	call  func(fd uintptr) bool
	try   func(fd uintptr) bool // the same, never waiting in the poller (TryReadBatch)
	count int                   // headers offered
	done  int                   // headers moved
	errno syscall.Errno         // the call's error
}

const (
	ctlLen = 64
)

func (b *batchState) init(n int, sysno uintptr) {
	// Three iovecs a message: a write may gather headers, payload and
	// trailer (roce.Message.Payload); a read uses the first.
	*b = batchState{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, 3*n), names: make([]unix.RawSockaddrInet6, n),
		ctl: make([][]byte, n), segs: make([]int, n)}
	for i := range b.ctl {
		b.ctl[i] = make([]byte, ctlLen)
	}
	b.mmsg = func(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno) {
		r, _, e := unix.Syscall6(sysno, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
		return int(r), e
	}
	b.call = func(fd uintptr) bool {
		r, e := b.mmsg(fd, b.hdrs[:b.count])
		if e == unix.EAGAIN || e == unix.EINTR {
			return false // wait for the poller
		}
		b.done, b.errno = r, e
		return true
	}
	b.try = func(fd uintptr) bool {
		b.done, b.errno = b.mmsg(fd, b.hdrs[:b.count])
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
	switch {
	case group && opts.FreeBind:
		return nil, fmt.Errorf("udpconn: listen on group %v: free bind is for a unicast address", a.Addr())
	case group:
		uc, err = bindGroup(a)
	case group && opts.reusePort:
		return nil, fmt.Errorf("udpconn: listen on group %v: queues are for a unicast address", a.Addr())
	case opts.FreeBind || opts.reusePort:
		uc, err = bindUnicast(network, a, opts.FreeBind, opts.reusePort)
	default:
		uc, err = net.ListenUDP(network, net.UDPAddrFromAddrPort(a))
	}
	if err != nil {
		return nil, fmt.Errorf("udpconn: %w", err)
	}
	if opts.Frames != nil && len(opts.Arena) < groBufLen {
		uc.Close()
		return nil, fmt.Errorf("udpconn: listen on %v: frames to lend over an arena of %d bytes: a frame is %d", a, len(opts.Arena), groBufLen)
	}
	c := &Conn{uc: uc, local: a, v6: a.Addr().Is6(), batch: opts.Batch, log: opts.Logger, frames: opts.Frames, arena: opts.Arena}
	if c.log == nil {
		c.log = slog.Default()
	}
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
		} else if !opts.FreeBind || opts.Interface > 0 {
			// Multicast leaves from the conn's own address and interface.
			// The kernel finds the interface from the address, unless
			// told (a free-bound address may be on none yet).
			mreq := &unix.IPMreqn{Address: a.Addr().As4()}
			if opts.FreeBind {
				mreq.Ifindex = int32(opts.Interface)
			}
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
	c.probeOffload(opts)
	return c, nil
}

// probeOffload asks the kernel for GSO and GRO, unless the options turn
// them off: a kernel without them (before 4.18 and 5.0) refuses, and the
// conn moves one datagram per buffer.
func (c *Conn) probeOffload(opts Options) {
	gsoErr, groErr := errors.New("turned off (Options.NoGSO)"), errors.New("turned off (Options.NoGRO)")
	_ = c.rc.Control(func(fd uintptr) {
		if !opts.NoGSO {
			if err := probeGSO(int(fd)); err != nil {
				gsoErr = fmt.Errorf("the kernel refused UDP_SEGMENT: %w", err)
			} else {
				gsoErr = nil
			}
		}
		if !opts.NoGRO {
			if err := probeGRO(int(fd)); err != nil {
				groErr = fmt.Errorf("the kernel refused UDP_GRO: %w", err)
			} else {
				groErr = nil
			}
		}
	})
	c.gso.Store(gsoErr == nil)
	c.gro = groErr == nil
	if gsoErr != nil {
		c.noGSO = gsoErr.Error()
	}
	if groErr != nil {
		c.noGRO = groErr.Error()
	}
}

// Offload says which of the kernel's UDP batching the conn uses.
func (c *Conn) Offload() Offload {
	c.offMu.Lock()
	defer c.offMu.Unlock()
	return Offload{GSO: c.gso.Load(), GRO: c.gro, NoGSO: c.noGSO, NoGRO: c.noGRO}
}

// bindUnicast binds a unicast address with the options net.ListenUDP
// does not set: free, one that no interface may hold yet
// (Options.FreeBind); reuse, as one socket of a SO_REUSEPORT group
// (ListenQueues).
func bindUnicast(network string, a netip.AddrPort, free, reuse bool) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			switch {
			case free && a.Addr().Is6():
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
			case free:
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
			}
			if serr != nil {
				serr = fmt.Errorf("free bind: %w", serr)
			} else if reuse {
				if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
					serr = fmt.Errorf("SO_REUSEPORT: %w", err)
				}
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, a.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
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
	c.once.Do(func() {
		c.closed.Store(true)
		err = c.uc.Close()
		if c.frames != nil {
			// The read under way, if any, returns now that the socket is
			// closed; the frames go back to the pool.
			c.rdMu.Lock()
			c.releaseFrames()
			c.rdMu.Unlock()
		}
	})
	return err
}

// ReadBatch reads up to len(msgs) packets, waiting for the first.
func (c *Conn) ReadBatch(msgs []roce.Message) (int, error) { return c.readBatch(msgs, true) }

// TryReadBatch reads up to len(msgs) packets that have arrived, without
// waiting: 0 and no error when there are none. It fails as ReadBatch does
// when the conn is closed or its read deadline passed.
func (c *Conn) TryReadBatch(msgs []roce.Message) (int, error) { return c.readBatch(msgs, false) }

// LendsFrames implements roce.FrameLender: the conn was given frames to
// read into (Options.Frames) and reads with GRO.
func (c *Conn) LendsFrames() bool { return c.frames != nil && c.gro }

// ReadBatchLent implements roce.FrameLender: ReadBatch that leaves each
// packet where it landed. A packet in a frame of Options.Frames is lent
// (Lent, Frame: the frame, which several packets may share, each holding
// a reference until ReturnFrames); one the conn read into its own buffer,
// when no frame was free, is not, and stays valid until the next read.
// It reads at most 8 buffers a call (the frames wait in the conn).
func (c *Conn) ReadBatchLent(msgs []roce.Message) (int, error) { return c.readLent(msgs, true) }

// TryReadBatchLent is ReadBatchLent that never waits: 0 and no error when
// nothing has arrived (transport.TryLender).
func (c *Conn) TryReadBatchLent(msgs []roce.Message) (int, error) { return c.readLent(msgs, false) }

func (c *Conn) readLent(msgs []roce.Message, wait bool) (int, error) {
	if !c.LendsFrames() {
		return 0, errors.New("udpconn: read lent: the conn lends no frames (no Options.Frames, or no GRO)")
	}
	c.rdMu.Lock()
	defer c.rdMu.Unlock()
	n := c.groRd.lendReadLen(min(len(msgs), c.batch, lendEntries))
	if len(msgs) == 0 {
		return 0, nil
	}
	return c.readGRO(msgs, n, wait, true)
}

// ReturnFrames implements roce.FrameLender: each frame named drops the
// reference its lent packet held (a frame once per packet of it lent).
func (c *Conn) ReturnFrames(frames []uint64) {
	for _, f := range frames {
		c.frames.FreeFrame(f)
	}
}

func (c *Conn) readBatch(msgs []roce.Message, wait bool) (int, error) {
	b := &c.rd
	n := min(len(msgs), c.batch)
	if n == 0 {
		return 0, nil
	}
	for i := range n {
		if cap(msgs[i].Buf) == 0 {
			return 0, fmt.Errorf("udpconn: read into message %d without a buffer", i)
		}
	}
	if c.gro {
		return c.readGRO(msgs, n, wait, false)
	}
	for i := range n {
		buf := msgs[i].Buf[:cap(msgs[i].Buf)]
		b.iovs[i] = unix.Iovec{Base: &buf[0]}
		b.iovs[i].SetLen(len(buf))
		h := &b.hdrs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.names[i])), Namelen: unix.SizeofSockaddrInet6,
			Iov: &b.iovs[i], Control: &b.ctl[i][0]}
		h.SetIovlen(1)
		h.SetControllen(ctlLen)
	}
	got, err := c.recv(n, wait)
	if err != nil {
		return 0, err
	}
	out := 0
	for i := range got {
		h := &b.hdrs[i]
		m := &msgs[i]
		m.Buf = m.Buf[:cap(m.Buf)]
		m.N = int(h.n)
		m.Addr = sockaddrToAddrPort(&b.names[i])
		tos, _ := parseControl(b.ctl[i][:h.hdr.Controllen])
		m.ECN = tos & 3
		m.ICRCChecked = false
		c.stats.RxPackets.Add(1)
		if h.hdr.Flags&unix.MSG_TRUNC != 0 {
			c.stats.RxTruncated.Add(1)
			continue
		}
		if c.v6 {
			if !c.icrcOK(m) {
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

// recv makes the read batch's recvmmsg over its first n headers, waiting
// for the first packet when wait. It returns how many headers it filled:
// 0 and no error when it did not wait and nothing had arrived.
func (c *Conn) recv(n int, wait bool) (int, error) {
	b := &c.rd
	b.count = n
	var err error
	if wait {
		err = c.rc.Read(b.call)
	} else if err = c.rc.Read(b.try); err == nil && (b.errno == unix.EAGAIN || b.errno == unix.EINTR) {
		return 0, nil
	}
	if err != nil {
		if errors.Is(err, net.ErrClosed) {
			return 0, roce.ErrConnClosed
		}
		return 0, fmt.Errorf("udpconn: recvmmsg: %w", err)
	}
	if b.errno != 0 {
		return 0, fmt.Errorf("udpconn: recvmmsg: %w", b.errno)
	}
	c.stats.RxCalls.Add(1)
	c.stats.RxBuffers.Add(uint64(b.done))
	c.stats.RxBytes.Add(b.moved())
	return b.done, nil
}

// WriteBatch fills each packet's ICRC and sends the batch: with GSO
// (Offload), consecutive packets to one destination that may share a send
// go as one. A message that cannot be sent (no RoCEv2 packet, a
// destination of the other address family) ends the batch: the ones
// before it are sent, and the error names it.
func (c *Conn) WriteBatch(msgs []roce.Message) (int, error) {
	b := &c.wr
	sent := 0
	for sent < len(msgs) {
		n, bad := c.prepareWrites(msgs[sent:], c.gso.Load())
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
			if errno == unix.EIO && b.segs[0] > 1 {
				c.refuseGSO(msgs[sent].Addr)
				continue // the same packets again, a datagram a send
			}
			if errno != 0 {
				return sent, fmt.Errorf("udpconn: sendmmsg to %v: %w", msgs[sent].Addr, errno)
			}
			moved := 0
			for _, s := range b.segs[:done] {
				moved += s
			}
			c.stats.TxCalls.Add(1)
			c.stats.TxBuffers.Add(uint64(done))
			c.stats.TxBytes.Add(b.moved())
			c.stats.TxPackets.Add(uint64(moved))
			sent += moved
			if done < n {
				continue // the rest of this batch again, the bad one last
			}
		}
		if bad != nil {
			return sent, fmt.Errorf("udpconn: message %d: %w", sent, bad)
		}
	}
	return sent, nil
}

// moved is the bytes the last call moved: its headers' msg_len.
func (b *batchState) moved() uint64 {
	var n uint64
	for i := range b.done {
		n += uint64(b.hdrs[i].n)
	}
	return n
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
