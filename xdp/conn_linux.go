//go:build linux

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/mcast"
)

// Conn is an AF_XDP socket bound to one receive queue of an interface: a
// roce.PacketConn for the userspace transport. It receives the frames the
// classifier redirects to it, checks them (RoCEv2, ICRC) and hands their
// transport packets to ReadBatch; WriteBatch wraps transport packets in
// Ethernet, IP and UDP headers, fills their ICRC and puts them on the
// transmit ring.
//
// Without Frames the UMEM is split in two: receive frames cycle between the
// fill and RX rings (ReadBatch returns each to the fill ring once copied
// out), transmit frames between txFree, the TX ring and the completion
// ring. With Frames, the Conn takes RingSize frames for each direction from
// the allocator; a frame ReadBatchLent lends leaves the Conn (it comes back
// to the allocator through ReturnFrames) and the fill ring is topped up
// with fresh ones.
//
// Sending to a peer whose Ethernet address the Neighbors is still
// resolving never waits: WriteBatch runs on the transport's send path,
// under its device's send lock and often in its receive loop, so waiting
// there for one neighbour (up to the resolver's 3 s) would stall every
// queue pair of the device. The packet is built into its transmit frame
// and held there, as the kernel holds packets on an unresolved neighbour
// (arp_queue): up to heldPerNeighbor for a neighbour and a quarter of the
// transmit frames in all, beyond which it is dropped; WriteBatch goes on
// with the rest and counts it as sent. When the resolution ends,
// routineHeld puts the held packets on the TX ring with the neighbour's
// address, in the order they were sent, or drops them if it did not
// answer (ConnStats.NoNeighbor): the transport's retransmission (the
// CM's, for a MAD) recovers them, and while the Neighbors holds the
// neighbour as failed a packet to it is refused at once. So the first
// packet to a peer never contacted, a CM REQ, leaves as soon as the peer
// answers, not at the CM's first retry, and a dead peer holds up neither
// the send path nor other peers' packets.
type Conn struct {
	file      *os.File // the socket; closing it unblocks ReadBatch
	raw       syscall.RawConn
	umem      []byte
	frameSize int
	queue     int
	mode      BindMode // BindCopy or BindZeroCopy, as bound
	wakeup    Wakeup   // as bound
	local     netip.AddrPort
	localMAC  [6]byte
	neighbors Neighbors
	log       *slog.Logger
	frames    FrameAllocator // nil: the Conn's own split of the UMEM
	nRX       int            // frames the fill and RX rings should hold
	ifindex   int
	prog      *Program // the classifier that feeds the socket, or nil
	// share is the Conn whose UMEM registration the socket shares
	// (ConnOptions.Share), or nil where it registered its own.
	share *Conn

	// groupsOf is the Conn whose groups the socket's multicast datagrams
	// go to: itself, or the first Conn of the UMEM it shares.
	groupsOf *Conn
	groupsMu sync.RWMutex
	groups   map[netip.Addr]*GroupConn // joined groups (group_linux.go)

	// closeMu is held for reading by ReadBatch, WriteBatch and
	// routineHeld while they touch the rings, and for writing by Close
	// while it unmaps them.
	closeMu            sync.RWMutex
	closed             atomic.Bool
	done               chan struct{} // closed by Close: routineHeld ends
	fill, comp, rx, tx *ring
	frame              roce.Frame // ReadBatch's decoder
	txAll              []uint64   // with frames: every transmit frame taken
	rxHeld             int        // with frames: frames in the fill and RX rings

	// txMu serializes sending: WriteBatch (GroupConn's too) and
	// routineHeld's release. Lock order: closeMu, then txMu.
	txMu    sync.Mutex
	txFree  []uint64                  // guarded by txMu: free transmit frames
	macs    map[netip.Addr][6]byte    // guarded by txMu: neighbours resolved
	held    map[netip.Addr]*heldQueue // guarded by txMu: packets waiting for their neighbour
	nHeld   int                       // guarded by txMu: frames in held
	maxHeld int                       // the most frames held in all
	heldWG  sync.WaitGroup            // routineHeld goroutines

	received, sent     atomic.Uint64
	rxBytes, txBytes   atomic.Uint64 // of the Ethernet frames received and sent
	badFrames, badICRC atomic.Uint64
	tooLong            atomic.Uint64
	lent, fillShort    atomic.Uint64
	rxWaits            atomic.Uint64
	txKicks            atomic.Uint64
	txKicksSkipped     atomic.Uint64
	fillKicks          atomic.Uint64
	fillKicksSkipped   atomic.Uint64
	groupReceived      atomic.Uint64
	groupOverflow      atomic.Uint64
	groupUnjoined      atomic.Uint64
	heldPackets        atomic.Uint64
	noNeighbor         atomic.Uint64
}

// heldQueue is the packets held for one neighbour being resolved: frames
// built but for the destination Ethernet address.
type heldQueue struct {
	pending <-chan struct{} // the Neighbors' resolution
	frames  []unix.XDPDesc
}

// heldPerNeighbor is how many packets are held for one neighbour while it
// is resolved: about what the kernel's default unres_qlen_bytes (212992)
// holds of full-sized frames, and more than a transport's first burst.
const heldPerNeighbor = 64

var (
	_ roce.FrameLender   = (*Conn)(nil)
	_ roce.ReadDeadliner = (*Conn)(nil)
)

const (
	ethHdrLen = 14
)

// NewConn opens an AF_XDP socket on the interface and queue opts names, in
// the calling thread's network namespace, and binds it in zero-copy mode
// where the driver supports it, else in copy mode (opts.Mode decides), with
// XDP_USE_NEED_WAKEUP where the kernel takes it (Wakeup); the log says
// which.
func NewConn(opts ConnOptions) (*Conn, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	c := &Conn{
		umem:      opts.UMEM,
		frameSize: opts.FrameSize,
		queue:     opts.Queue,
		local:     opts.LocalAddr,
		neighbors: opts.Neighbors,
		log:       opts.Logger,
		frames:    opts.Frames,
		macs:      make(map[netip.Addr][6]byte),
		held:      make(map[netip.Addr]*heldQueue),
		done:      make(chan struct{}),
		ifindex:   opts.Ifindex,
		prog:      opts.Program,
		share:     opts.Share,
		groups:    make(map[netip.Addr]*GroupConn),
	}
	c.groupsOf = c
	if c.share != nil {
		c.groupsOf = c.share.groupsOf
	}
	if c.frameSize == 0 {
		c.frameSize = 4096
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	mac := opts.LocalMAC
	if mac == nil {
		ifi, err := net.InterfaceByIndex(opts.Ifindex)
		if err != nil {
			return nil, fmt.Errorf("xdp: conn on ifindex %d: %w", opts.Ifindex, err)
		}
		mac = ifi.HardwareAddr
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("xdp: conn on ifindex %d: Ethernet address %v is not 6 bytes", opts.Ifindex, mac)
	}
	copy(c.localMAC[:], mac)

	frames := len(c.umem) / c.frameSize
	ringSize := opts.RingSize
	if ringSize == 0 {
		ringSize = 2048
		if c.frames != nil {
			ringSize = 512
		}
		for ringSize > frames/2 {
			ringSize /= 2
		}
	}
	c.nRX = min(ringSize, frames/2)

	var fd int
	var err error
	switch {
	case c.share != nil:
		// The kernel binds a shared socket as it bound the UMEM's first.
		fd, err = c.open(opts.Ifindex, uint32(ringSize), 0)
		c.mode = c.share.mode
		c.wakeup.NeedWakeup, c.wakeup.NoNeedWakeup = c.share.wakeup.NeedWakeup, c.share.wakeup.NoNeedWakeup
	case opts.Mode == BindAuto:
		fd, err = c.openWakeup(opts.Ifindex, uint32(ringSize), unix.XDP_ZEROCOPY, opts.NoNeedWakeup)
		c.mode = BindZeroCopy
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			c.log.Info("xdp: AF_XDP zero-copy not supported by the driver: copy mode", "ifindex", opts.Ifindex, "queue", opts.Queue, "error", err)
			fd, err = c.openWakeup(opts.Ifindex, uint32(ringSize), unix.XDP_COPY, opts.NoNeedWakeup)
			c.mode = BindCopy
		}
	case opts.Mode == BindCopy:
		fd, err = c.openWakeup(opts.Ifindex, uint32(ringSize), unix.XDP_COPY, opts.NoNeedWakeup)
		c.mode = BindCopy
	case opts.Mode == BindZeroCopy:
		fd, err = c.openWakeup(opts.Ifindex, uint32(ringSize), unix.XDP_ZEROCOPY, opts.NoNeedWakeup)
		c.mode = BindZeroCopy
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("xdp: AF_XDP socket on ifindex %d queue %d: %w", opts.Ifindex, opts.Queue, err)
	}
	c.log.Info("xdp: AF_XDP socket bound", "ifindex", opts.Ifindex, "queue", opts.Queue, "mode", c.mode, "wakeup", c.wakeup, "shared_umem", c.share != nil)

	if c.frames == nil {
		// Receive frames go to the fill ring; the rest transmit.
		for i := range c.nRX {
			c.fill.addrs[i] = uint64(i * c.frameSize)
		}
		c.fill.submit(uint32(c.nRX))
		for i := c.nRX; i < frames; i++ {
			c.txFree = append(c.txFree, uint64(i*c.frameSize))
		}
	} else {
		for range ringSize {
			off, ok := c.frames.AllocFrame()
			if !ok {
				break
			}
			c.txAll = append(c.txAll, off)
		}
		c.txFree = append(c.txFree, c.txAll...)
		c.fill.submit(c.refill(0))
		if len(c.txAll) < ringSize || c.rxHeld < c.nRX {
			c.teardown(fd)
			return nil, fmt.Errorf("xdp: AF_XDP socket on ifindex %d queue %d: the frame allocator has fewer than %d free frames", opts.Ifindex, opts.Queue, ringSize+c.nRX)
		}
	}

	c.maxHeld = max(1, len(c.txFree)/4)

	if err := unix.SetNonblock(fd, true); err != nil {
		c.teardown(fd)
		return nil, fmt.Errorf("xdp: AF_XDP socket: set non-blocking: %w", err)
	}
	c.file = os.NewFile(uintptr(fd), "xsk")
	if c.raw, err = c.file.SyscallConn(); err != nil {
		c.file.Close()
		c.freeFrames()
		c.unmap()
		return nil, fmt.Errorf("xdp: AF_XDP socket: %w", err)
	}
	if opts.Program != nil {
		if err := opts.Program.setSocket(opts.Queue, fd); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (o *ConnOptions) check() error {
	fs := o.FrameSize
	if fs == 0 {
		fs = 4096
	}
	switch {
	case o.Ifindex <= 0:
		return fmt.Errorf("xdp: conn: ifindex %d", o.Ifindex)
	case o.Queue < 0:
		return fmt.Errorf("xdp: conn: queue %d", o.Queue)
	case fs != 2048 && fs != 4096:
		return fmt.Errorf("xdp: conn: frame size %d is not 2048 or 4096", fs)
	case len(o.UMEM) < 4*fs || len(o.UMEM)%fs != 0:
		return fmt.Errorf("xdp: conn: UMEM of %d bytes is not a multiple of the %d-byte frame, at least 4 frames", len(o.UMEM), fs)
	case uintptr(unsafe.Pointer(unsafe.SliceData(o.UMEM)))%uintptr(os.Getpagesize()) != 0:
		return fmt.Errorf("xdp: conn: UMEM is not page-aligned (allocate it with mmap)")
	case o.RingSize != 0 && (o.RingSize < 0 || o.RingSize&(o.RingSize-1) != 0):
		return fmt.Errorf("xdp: conn: ring size %d is not a power of two", o.RingSize)
	case !o.LocalAddr.IsValid():
		return fmt.Errorf("xdp: conn: no local address")
	case o.Share != nil && o.Frames == nil:
		return fmt.Errorf("xdp: conn on queue %d: a shared UMEM needs Frames: the Conns take their frames from one allocator", o.Queue)
	case o.Share != nil && (unsafe.SliceData(o.UMEM) != unsafe.SliceData(o.Share.umem) || len(o.UMEM) != len(o.Share.umem) || fs != o.Share.frameSize):
		return fmt.Errorf("xdp: conn on queue %d: a shared UMEM must be Share's, of its frame size %d", o.Queue, o.Share.frameSize)
	case o.Share != nil && o.Share.closed.Load():
		return fmt.Errorf("xdp: conn on queue %d: share the UMEM of a closed Conn: %w", o.Queue, roce.ErrConnClosed)
	case o.Neighbors == nil:
		return fmt.Errorf("xdp: conn: no Neighbors to resolve peers' Ethernet addresses")
	}
	return nil
}

// openWakeup opens the socket (open) bound with XDP_USE_NEED_WAKEUP as
// well as bindFlags, and again without when the bind fails with EINVAL:
// the kernel's answer to a flag it does not know (before Linux 5.4). It
// records the outcome in c.wakeup.
func (c *Conn) openWakeup(ifindex int, ringSize uint32, bindFlags uint16, no bool) (int, error) {
	if no {
		c.wakeup.NeedWakeup, c.wakeup.NoNeedWakeup = false, "turned off by the options"
		return c.open(ifindex, ringSize, bindFlags)
	}
	fd, err := c.open(ifindex, ringSize, bindFlags|unix.XDP_USE_NEED_WAKEUP)
	if err == nil {
		c.wakeup.NeedWakeup, c.wakeup.NoNeedWakeup = true, ""
		return fd, nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return -1, err
	}
	fd, err2 := c.open(ifindex, ringSize, bindFlags)
	if err2 != nil {
		return -1, err2
	}
	c.wakeup.NeedWakeup, c.wakeup.NoNeedWakeup = false, "the kernel refused it: "+err.Error()
	return fd, nil
}

// bind binds an AF_XDP socket; tests replace it to play an older kernel.
var bind = unix.Bind

// open creates the socket, registers the UMEM, maps the rings, sets the TX
// budget (c.wakeup.TXBudget) and binds.
func (c *Conn) open(ifindex int, ringSize uint32, bindFlags uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			err = fmt.Errorf("%w: %w", ErrNotSupported, err)
		}
		return -1, fmt.Errorf("socket: %w", err)
	}
	if c.share == nil {
		reg := unix.XDPUmemReg{
			Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(c.umem)))),
			Len:  uint64(len(c.umem)),
			Size: uint32(c.frameSize),
		}
		if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("register UMEM: %w", err)
		}
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, int(ringSize)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("ring size %d (option %d): %w", ringSize, opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ring offsets: %w", err)
	}
	if c.fill, err = mapRing(fd, &off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, ringSize, 8, false); err == nil {
		if c.comp, err = mapRing(fd, &off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, ringSize, 8, false); err == nil {
			if c.rx, err = mapRing(fd, &off.Rx, unix.XDP_PGOFF_RX_RING, ringSize, unsafe.Sizeof(unix.XDPDesc{}), true); err == nil {
				c.tx, err = mapRing(fd, &off.Tx, unix.XDP_PGOFF_TX_RING, ringSize, unsafe.Sizeof(unix.XDPDesc{}), true)
			}
		}
	}
	if err != nil {
		c.teardown(fd)
		return -1, err
	}
	c.setTXBudget(fd, ringSize)
	sa := &unix.SockaddrXDP{Flags: bindFlags, Ifindex: uint32(ifindex), QueueID: uint32(c.queue)}
	if c.share == nil {
		err = bind(fd, sa)
	} else {
		// The fill and completion rings above are the socket's own: a
		// UMEM shared across queues needs a pair per queue.
		var berr error
		if err = c.share.raw.Control(func(sfd uintptr) {
			sa.Flags, sa.SharedUmemFD = unix.XDP_SHARED_UMEM, uint32(sfd)
			berr = bind(fd, sa)
		}); err == nil {
			err = berr
		}
		if err != nil {
			err = fmt.Errorf("shared UMEM: %w", err)
		}
	}
	if err != nil {
		c.teardown(fd)
		return -1, fmt.Errorf("bind: %w", err)
	}
	return fd, nil
}

// defaultTXBudget is how many descriptors a copy-mode sendto sends when
// the socket's budget is not set (the kernel's TX_BATCH_SIZE).
const defaultTXBudget = 32

// setTXBudget has one copy-mode sendto send up to the whole TX ring
// (XDP_MAX_TX_SKB_BUDGET, Linux 6.17; at least 32, at most the ring's
// size) instead of 32 descriptors; a kernel without the option
// (ENOPROTOOPT) keeps 32.
func (c *Conn) setTXBudget(fd int, ringSize uint32) {
	c.wakeup.TXBudget, c.wakeup.NoTXBudget = defaultTXBudget, ""
	if ringSize <= defaultTXBudget {
		c.wakeup.NoTXBudget = "the ring holds no more"
		return
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(ringSize)); err != nil {
		c.wakeup.NoTXBudget = "the kernel's default: " + err.Error()
		return
	}
	c.wakeup.TXBudget = int(ringSize)
}

func setsockopt(fd, name int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(name), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func (c *Conn) teardown(fd int) {
	unix.Close(fd)
	c.freeFrames()
	c.unmap()
}

func (c *Conn) unmap() error {
	var errs []error
	for _, r := range []**ring{&c.fill, &c.comp, &c.rx, &c.tx} {
		if err := (*r).unmap(); err != nil {
			errs = append(errs, err)
		}
		*r = nil
	}
	return errors.Join(errs...)
}

// Mode returns how the socket is bound: BindCopy or BindZeroCopy.
func (c *Conn) Mode() BindMode { return c.mode }

// Wakeup returns how the socket wakes the kernel, as bound.
func (c *Conn) Wakeup() Wakeup { return c.wakeup }

// LocalAddr implements roce.PacketConn.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// SetReadDeadline implements roce.ReadDeadliner: the deadline of
// ReadBatch's and ReadBatchLent's wait for frames.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.file.SetReadDeadline(t) }

// ReadBatch implements roce.PacketConn. Frames that are not well-formed
// RoCEv2, carry a wrong ICRC or do not fit the caller's buffer are dropped
// and counted (Stats).
func (c *Conn) ReadBatch(msgs []roce.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	return c.read(msgs, false)
}

func (c *Conn) read(msgs []roce.Message, lend bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	for {
		if c.closed.Load() {
			return 0, roce.ErrConnClosed
		}
		n := c.receive(msgs, lend)
		// A driver that ran out of fill entries, or went idle, waits
		// for a wakeup; without one no frame arrives. With frames in
		// hand a failed wakeup is left to the next read, which tries
		// again while the flag is set.
		werr := c.wakeFill()
		if n > 0 {
			return n, nil
		}
		if werr != nil {
			return 0, werr
		}
		c.rxWaits.Add(1)
		// The netpoller resets readiness before the callback looks at the
		// ring, so a frame that lands after the look wakes the wait.
		err := c.raw.Read(func(uintptr) bool { return c.rx.available() > 0 })
		if err != nil {
			if c.closed.Load() {
				return 0, roce.ErrConnClosed
			}
			return 0, fmt.Errorf("xdp: wait for AF_XDP frames: %w", err)
		}
	}
}

// TryReadBatch implements transport.TryReader: ReadBatch that takes what
// the RX ring holds now and never waits (0 and no error when it holds
// nothing), for a receive loop that busy-polls. It wakes the driver for
// the fill ring when the ring's flag asks, as ReadBatch does.
func (c *Conn) TryReadBatch(msgs []roce.Message) (int, error) {
	return c.tryRead(msgs, false)
}

// TryReadBatchLent is ReadBatchLent that never waits
// (transport.TryLender).
func (c *Conn) TryReadBatchLent(msgs []roce.Message) (int, error) {
	if c.frames == nil {
		return 0, fmt.Errorf("%w: lending frames of a Conn made without Frames", ErrNotSupported)
	}
	return c.tryRead(msgs, true)
}

func (c *Conn) tryRead(msgs []roce.Message, lend bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed.Load() {
		return 0, roce.ErrConnClosed
	}
	n := c.receive(msgs, lend)
	if err := c.wakeFill(); err != nil && n == 0 {
		return 0, err
	}
	return n, nil
}

// receive takes up to len(msgs) frames off the RX ring and returns how
// many messages it filled. Copying (lend false), it returns each frame to
// the fill ring; lending, a frame delivered leaves with its message, one
// dropped goes back to the fill ring, and the fill ring is topped up from
// the allocator.
func (c *Conn) receive(msgs []roce.Message, lend bool) int {
	avail := c.rx.available()
	filled := 0
	var used, refilled uint32
	var bytes uint64
	for used < avail && filled < len(msgs) {
		d := c.rx.descs[(c.rx.local+used)&c.rx.mask]
		used++
		frame := d.Addr &^ uint64(c.frameSize-1)
		m := &msgs[filled]
		if c.deliver(c.umem[d.Addr:d.Addr+uint64(d.Len)], m, lend) {
			filled++
			bytes += uint64(d.Len)
			if lend {
				m.Lent, m.Frame = true, frame
				continue
			}
		}
		c.fill.addrs[(c.fill.local+refilled)&c.fill.mask] = frame
		refilled++
	}
	if used > 0 {
		c.rx.release(used)
		c.received.Add(uint64(filled))
		c.rxBytes.Add(bytes)
		if lend {
			c.rxHeld -= int(used - refilled)
			c.lent.Add(uint64(used - refilled))
			refilled += c.refill(refilled)
		}
		c.fill.submit(refilled) // the batch's frames back and fresh ones, in one update
	}
	return filled
}

// refill writes fresh frames from the allocator to the fill ring, after
// the skip entries already written there and not yet submitted, until the
// ring and the RX ring hold nRX; it returns how many it wrote, for the
// caller to submit with the rest.
func (c *Conn) refill(skip uint32) uint32 {
	n := uint32(0)
	for ; c.rxHeld < c.nRX; c.rxHeld++ {
		off, ok := c.frames.AllocFrame()
		if !ok {
			c.fillShort.Add(1)
			break
		}
		c.fill.addrs[(c.fill.local+skip+n)&c.fill.mask] = off
		n++
	}
	return n
}

// wakeFill wakes the driver for the fill ring (recvfrom) when the ring's
// flag asks for it (see Wakeup).
func (c *Conn) wakeFill() error {
	if !c.fill.needsWakeup() {
		c.fillKicksSkipped.Add(1)
		return nil
	}
	c.fillKicks.Add(1)
	var serr error
	err := c.raw.Control(func(fd uintptr) {
		_, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.EINTR:
		default:
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("xdp: AF_XDP recvfrom to wake the driver for the fill ring: %w", err)
	}
	return nil
}

func (c *Conn) deliver(frame []byte, m *roce.Message, lend bool) bool {
	f := &c.frame
	if err := f.DecodeEthernet(frame); err != nil {
		c.badFrames.Add(1)
		return false
	}
	if err := f.VerifyICRC(); err != nil {
		c.badICRC.Add(1)
		return false
	}
	if f.Dst.Addr().IsMulticast() {
		c.toGroup(f) // the group's conn reads it
		return false
	}
	p := f.UDPPayload()
	switch {
	case lend:
		m.Buf, m.N = p[:len(p):len(p)], len(p)
	case cap(m.Buf) < len(p):
		c.tooLong.Add(1)
		return false
	default:
		m.N = copy(m.Buf[:cap(m.Buf)], p)
		m.Lent = false
	}
	m.Addr = f.Src
	m.ECN = f.ECN
	m.ICRCChecked = true
	return true
}

// LendsFrames implements roce.FrameLender: a Conn made with Frames lends.
func (c *Conn) LendsFrames() bool { return c.frames != nil }

// ReadBatchLent implements roce.FrameLender: ReadBatch that leaves each
// packet in its frame and lends the frame (a Conn without Frames refuses,
// with an error matching ErrNotSupported).
func (c *Conn) ReadBatchLent(msgs []roce.Message) (int, error) {
	if c.frames == nil {
		return 0, fmt.Errorf("%w: lending frames of a Conn made without Frames", ErrNotSupported)
	}
	return c.read(msgs, true)
}

// ReturnFrames implements roce.FrameLender: the frames go back to the
// allocator.
func (c *Conn) ReturnFrames(frames []uint64) {
	for _, f := range frames {
		c.frames.FreeFrame(f)
	}
}

// freeFrames gives the allocator every frame the Conn holds: those on the
// fill and RX rings (the socket is closed: the kernel no longer uses them)
// and every transmit frame.
func (c *Conn) freeFrames() {
	if c.frames == nil {
		return
	}
	if c.fill != nil {
		for i := atomic.LoadUint32(c.fill.consumer); i != c.fill.local; i++ {
			c.frames.FreeFrame(c.fill.addrs[i&c.fill.mask])
			c.rxHeld--
		}
	}
	if c.rx != nil {
		for i := c.rx.local; i != atomic.LoadUint32(c.rx.producer); i++ {
			c.frames.FreeFrame(c.rx.descs[i&c.rx.mask].Addr &^ uint64(c.frameSize-1))
			c.rxHeld--
		}
	}
	for _, f := range c.txAll {
		c.frames.FreeFrame(f)
	}
	c.txAll, c.txFree = nil, nil
}

// txStall bounds how long WriteBatch waits for a free transmit frame.
const txStall = time.Second

// WriteBatch implements roce.PacketConn: it sends msgs[i].Buf[:N] (a
// transport packet whose ICRC the Conn fills) to msgs[i].Addr with ECN
// msgs[i].ECN, waiting for transmit frames to come back when all are in
// flight. A packet to a neighbour being resolved is held (see Conn) and
// counts as sent.
func (c *Conn) WriteBatch(msgs []roce.Message) (int, error) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	c.txMu.Lock()
	defer c.txMu.Unlock()
	done := 0 // messages on the TX ring or held
	var stalled time.Time
	for done < len(msgs) {
		if c.closed.Load() {
			return done, roce.ErrConnClosed
		}
		c.reap()
		var queued uint32
		before := done
		for free := c.tx.free(); done < len(msgs) && queued < free && len(c.txFree) > 0; done++ {
			addr := c.txFree[len(c.txFree)-1]
			n, pending, err := c.build(c.umem[addr:addr+uint64(c.frameSize)], &msgs[done])
			if err != nil {
				c.tx.submit(queued)
				c.sent.Add(uint64(queued))
				return done, errors.Join(err, c.kick())
			}
			c.txFree = c.txFree[:len(c.txFree)-1]
			if pending != nil {
				c.holdLocked(msgs[done].Addr.Addr().Unmap(), pending, unix.XDPDesc{Addr: addr, Len: uint32(n)})
				continue
			}
			c.tx.descs[(c.tx.local+queued)&c.tx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(n)}
			queued++
			c.txBytes.Add(uint64(n))
		}
		c.tx.submit(queued)
		c.sent.Add(uint64(queued))
		if err := c.kick(); err != nil {
			return done, err
		}
		if done == len(msgs) {
			break
		}
		// Every transmit frame is in flight: wait for completions.
		if done > before {
			stalled = time.Time{}
		} else if stalled.IsZero() {
			stalled = time.Now()
		} else if time.Since(stalled) > txStall {
			return done, fmt.Errorf("xdp: AF_XDP transmit stalled: no completion for %v", txStall)
		}
		runtime.Gosched()
	}
	return done, nil
}

// holdLocked holds the packet built in frame d for ip until its neighbour
// answers, and starts ip's routineHeld with its first packet; beyond
// heldPerNeighbor for ip or maxHeld in all the packet is dropped. Must
// hold txMu.
func (c *Conn) holdLocked(ip netip.Addr, pending <-chan struct{}, d unix.XDPDesc) {
	h := c.held[ip]
	if h == nil {
		h = &heldQueue{pending: pending}
		c.held[ip] = h
		c.heldWG.Add(1)
		go c.routineHeld(ip, h, pending)
	}
	if len(h.frames) >= heldPerNeighbor || c.nHeld >= c.maxHeld {
		c.txFree = append(c.txFree, d.Addr)
		c.noNeighbor.Add(1)
		return
	}
	h.frames = append(h.frames, d)
	c.nHeld++
	c.heldPackets.Add(1)
}

// routineHeld waits for the resolution of ip's neighbour, then releases
// the packets held for it.
func (c *Conn) routineHeld(ip netip.Addr, h *heldQueue, pending <-chan struct{}) {
	defer c.heldWG.Done()
	for {
		select {
		case <-pending:
		case <-c.done:
			return // Close frees the frames
		}
		mac, next, err := c.neighbors.Lookup(ip)
		if next != nil {
			pending = next // a resolution begun since: bounded as well
			continue
		}
		c.release(ip, h, mac, err)
		return
	}
}

// release puts ip's held packets on the TX ring with the neighbour's
// address, or drops them when it has none (err); and drops those the
// ring has no room for.
func (c *Conn) release(ip netip.Addr, h *heldQueue, hw net.HardwareAddr, err error) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	c.txMu.Lock()
	defer c.txMu.Unlock()
	if c.closed.Load() {
		return // Close frees every transmit frame
	}
	delete(c.held, ip)
	c.nHeld -= len(h.frames)
	if err == nil && len(hw) != 6 {
		err = fmt.Errorf("xdp: send to %v: Ethernet address %v is not 6 bytes", ip, hw)
	}
	frames := h.frames
	var queued uint32
	if err == nil {
		mac := [6]byte(hw)
		c.macs[ip] = mac
		c.reap()
		for free := c.tx.free(); len(frames) > 0 && queued < free; frames = frames[1:] {
			copy(c.umem[frames[0].Addr:], mac[:])
			c.tx.descs[(c.tx.local+queued)&c.tx.mask] = frames[0]
			queued++
			c.txBytes.Add(uint64(frames[0].Len))
		}
		c.tx.submit(queued)
		c.sent.Add(uint64(queued))
		if err := c.kick(); err != nil {
			c.log.Warn("xdp: send the packets held for a neighbour", "to", ip, "err", err)
		}
	}
	for _, d := range frames {
		c.txFree = append(c.txFree, d.Addr)
	}
	c.noNeighbor.Add(uint64(len(frames)))
	if len(frames) > 0 {
		c.log.Debug("xdp: held packets dropped", "to", ip, "sent", queued, "dropped", len(frames), "err", err)
	}
}

// reap returns completed transmit frames to txFree.
func (c *Conn) reap() {
	n := c.comp.available()
	for i := range n {
		c.txFree = append(c.txFree, c.comp.addrs[(c.comp.local+i)&c.comp.mask]&^uint64(c.frameSize-1))
	}
	c.comp.release(n)
}

// kick asks the kernel to send what the TX ring holds, when the ring's
// flag says it must be asked (see Wakeup). In copy mode each sendto sends
// at most the TX budget, so it repeats while the kernel makes progress.
func (c *Conn) kick() error {
	if c.tx.pending() == 0 {
		return nil
	}
	if !c.tx.needsWakeup() {
		c.txKicksSkipped.Add(1)
		return nil
	}
	var serr error
	err := c.raw.Write(func(fd uintptr) bool {
		for c.tx.pending() > 0 {
			before := c.tx.pending()
			c.txKicks.Add(1)
			_, _, e := unix.Syscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
			default:
				serr = fmt.Errorf("xdp: AF_XDP sendto: %w", e)
				return true
			}
			if c.mode == BindZeroCopy || c.tx.pending() == before {
				return true // the driver sends on its own, or is busy
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("xdp: AF_XDP sendto: %w", err)
	}
	return serr
}

// build writes the Ethernet frame carrying m into frame and returns its
// length; while m's neighbour is resolved, it returns the resolution's
// channel, and the frame's destination address is left zero.
func (c *Conn) build(frame []byte, m *roce.Message) (int, <-chan struct{}, error) {
	dst := m.Addr.Addr().Unmap()
	v4 := c.local.Addr().Unmap().Is4()
	if dst.Is4() != v4 {
		return 0, nil, fmt.Errorf("xdp: send to %v from %v: address families differ", m.Addr, c.local)
	}
	if !m.Sendable() {
		return 0, nil, fmt.Errorf("xdp: send to %v: packet of %d bytes (headers %d, payload %d)", m.Addr, m.N, m.Hdr, len(m.Payload))
	}
	mac, pending, err := c.neighbor(dst)
	if err != nil {
		c.noNeighbor.Add(1)
		return 0, nil, err
	}
	total := ethHdrLen + roce.IPUDPLen(!v4) + m.Len()
	if total > len(frame) {
		return 0, nil, fmt.Errorf("xdp: send to %v: %d-byte frame exceeds the %d-byte UMEM frame", m.Addr, total, len(frame))
	}
	copy(frame[0:6], mac[:])
	copy(frame[6:12], c.localMAC[:])
	if v4 {
		binary.BigEndian.PutUint16(frame[12:], 0x0800)
	} else {
		binary.BigEndian.PutUint16(frame[12:], 0x86dd)
	}
	ip := frame[ethHdrLen:total]
	from := c.local
	if m.SrcPort != 0 {
		from = netip.AddrPortFrom(from.Addr(), m.SrcPort)
	}
	hl, err := roce.PutIPUDPHeaders(ip, from, m.Addr, m.Len(), m.ECN)
	if err != nil {
		return 0, nil, fmt.Errorf("xdp: send to %v: %w", m.Addr, err)
	}
	if _, err := m.CopyTo(ip[hl:]); err != nil {
		return 0, nil, fmt.Errorf("xdp: send to %v: %w", m.Addr, err)
	}
	if err := roce.PutICRC(ip); err != nil {
		return 0, nil, fmt.Errorf("xdp: send to %v: %w", m.Addr, err)
	}
	return total, pending, nil
}

// neighbor returns the Ethernet address for ip: a multicast group's own
// (01:00:5e or 33:33 and the group's low bits, as the kernel's
// ip_eth_mc_map and ipv6_eth_mc_map make it), else from the cache or the
// Neighbors (an answer there is cached); or, while the Neighbors resolves
// it, the resolution's channel. A neighbour that does not answer is an
// error (the Neighbors holds it as failed for a while, answering at
// once). Must hold txMu.
func (c *Conn) neighbor(ip netip.Addr) ([6]byte, <-chan struct{}, error) {
	if ip.IsMulticast() {
		mac, err := mcast.EthernetMAC(ip)
		return mac, nil, err
	}
	if mac, ok := c.macs[ip]; ok {
		return mac, nil, nil
	}
	if h := c.held[ip]; h != nil {
		select {
		case <-h.pending:
			// The resolution ended, and routineHeld is about to release
			// the packets held: this one joins them, unless the
			// neighbour did not answer.
			if _, _, err := c.neighbors.Lookup(ip); err != nil {
				return [6]byte{}, nil, fmt.Errorf("xdp: send to %v: %w", ip, err)
			}
		default:
		}
		return [6]byte{}, h.pending, nil
	}
	hw, pending, err := c.neighbors.Lookup(ip)
	switch {
	case err != nil:
		return [6]byte{}, nil, fmt.Errorf("xdp: send to %v: %w", ip, err)
	case pending != nil:
		return [6]byte{}, pending, nil
	case len(hw) != 6:
		return [6]byte{}, nil, fmt.Errorf("xdp: send to %v: Ethernet address %v is not 6 bytes", ip, hw)
	}
	mac := [6]byte(hw)
	c.macs[ip] = mac
	return mac, nil, nil
}

// Stats returns the Conn's counters.
func (c *Conn) Stats() (ConnStats, error) {
	s := ConnStats{
		Received:  c.received.Load(),
		Sent:      c.sent.Load(),
		RxBytes:   c.rxBytes.Load(),
		TxBytes:   c.txBytes.Load(),
		BadFrames: c.badFrames.Load(),
		BadICRC:   c.badICRC.Load(),
		TooLong:   c.tooLong.Load(),
		Lent:      c.lent.Load(),
		FillShort: c.fillShort.Load(),
		RXWaits:   c.rxWaits.Load(),

		TXKicks:          c.txKicks.Load(),
		TXKicksSkipped:   c.txKicksSkipped.Load(),
		FillKicks:        c.fillKicks.Load(),
		FillKicksSkipped: c.fillKicksSkipped.Load(),

		GroupReceived: c.groupReceived.Load(),
		GroupOverflow: c.groupOverflow.Load(),
		GroupUnjoined: c.groupUnjoined.Load(),

		HeldForNeighbor: c.heldPackets.Load(),
		NoNeighbor:      c.noNeighbor.Load(),
	}
	var xs unix.XDPStatistics
	var serr error
	err := c.raw.Control(func(fd uintptr) {
		serr = getsockopt(int(fd), unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&xs), unsafe.Sizeof(xs))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return s, fmt.Errorf("xdp: AF_XDP statistics: %w", err)
	}
	s.RXRingDrops = xs.Rx_dropped + xs.Rx_ring_full // a fill-ring miss counts in Rx_dropped
	return s, nil
}

// Close implements roce.PacketConn: it closes the groups' conns still
// open, unblocks ReadBatch, closes the socket (which leaves the
// classifier's map with it), drops the packets held for neighbours
// (counted as NoNeighbor) and unmaps the rings. The UMEM stays the caller's. Close is idempotent.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.done)
	gerr := c.closeGroups()
	err := errors.Join(gerr, c.file.Close())
	c.closeMu.Lock()
	for _, h := range c.held {
		c.noNeighbor.Add(uint64(len(h.frames)))
	}
	c.freeFrames()
	err = errors.Join(err, c.unmap())
	c.closeMu.Unlock()
	c.heldWG.Wait()
	return err
}
