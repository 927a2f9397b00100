package udpbaseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/rbridge/rbridge/roce/udpconn"
)

// MaxInflight is the most datagrams a Flow keeps sent and not received: the
// transport's requester keeps at most 512 packets unacknowledged.
const MaxInflight = 512

// Options configures a Flow.
type Options struct {
	// From and To are the sending and receiving sockets' addresses, of one
	// family; port 0 takes a free port.
	From, To netip.AddrPort
	// Size is the message size in bytes; Datagram the most bytes a
	// datagram carries (the path MTU): a message is ceil(Size/Datagram)
	// datagrams.
	Size, Datagram int
	// Window is how many messages may be outstanding.
	Window int
	// Batch is the most sends one system call makes, and the most
	// buffers one reads (default 64): a datagram each, or with GSO and
	// GRO (as roce/udpconn, on by default) several.
	Batch int
	// NoGSO and NoGRO turn the kernel's UDP batching off, as
	// roce/udpconn.Options does.
	NoGSO, NoGRO bool
	// StallTimeout is how long the sender waits for the window to open
	// before it takes what is in flight as lost (default 20 ms).
	StallTimeout time.Duration
}

func (o *Options) check() error {
	switch {
	case o.Size < 1 || o.Datagram < 1 || o.Datagram > 65507:
		return fmt.Errorf("udpbaseline: %d-byte messages in %d-byte datagrams", o.Size, o.Datagram)
	case o.Window < 1:
		return fmt.Errorf("udpbaseline: window of %d messages", o.Window)
	case o.Batch < 0 || o.Batch > 1024:
		return fmt.Errorf("udpbaseline: batch of %d datagrams: want 1 to 1024", o.Batch)
	case !o.From.Addr().IsValid() || !o.To.Addr().IsValid():
		return fmt.Errorf("udpbaseline: from %v to %v: both addresses are needed", o.From, o.To)
	case o.From.Addr().Unmap().Is4() != o.To.Addr().Unmap().Is4():
		return fmt.Errorf("udpbaseline: from %v to %v: address families differ", o.From, o.To)
	}
	return nil
}

// batchConn is what ipv4.PacketConn and ipv6.PacketConn share.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

var (
	_ batchConn = (*ipv4.PacketConn)(nil)
	_ batchConn = (*ipv6.PacketConn)(nil)
)

// Result is what a Flow moved.
type Result struct {
	Sent, Received uint64 // datagrams
	Messages       uint64 // whole messages' worth of datagrams received
	// End is when the last datagram was sent or received, whichever is
	// later: what a rate divides by, without the wait for lost datagrams.
	End time.Time
	// TxCalls and RxCalls are the sendmmsg and recvmmsg calls made;
	// TxBuffers and RxBuffers the sends and reads they held: a datagram
	// each, or a GSO send or GRO buffer of several.
	TxCalls, RxCalls, TxBuffers, RxBuffers uint64
}

// Lost is the number of datagrams sent and never received.
func (r Result) Lost() uint64 { return r.Sent - min(r.Received, r.Sent) }

// Flow is a sending and a receiving UDP socket and the window between them.
type Flow struct {
	opts          Options
	perMsg        uint64 // datagrams a message
	window        uint64 // datagrams outstanding, at most
	rx, tx        *net.UDPConn
	rxb, txb      batchConn
	closers       []io.Closer // tx's, then rx's (stops routineReceive)
	out           []ipv4.Message
	big           []byte // the datagrams' bytes: a GSO send's
	segCtl        []byte // UDP_SEGMENT for a GSO send of datagrams
	gso, gro      bool   // gso used by Send and Offload, gro set before start
	noGSO, noGRO  string // why not (Offload)
	stall         *time.Timer
	wg            sync.WaitGroup
	closeOnce     sync.Once
	closeErr      error
	progress      chan struct{} // a token when datagrams arrived
	received      atomic.Uint64
	lastArrival   atomic.Int64 // Unix nanoseconds
	rxErr         atomic.Pointer[error]
	sent, written uint64 // datagrams sent; messages' datagrams queued (Send)
	forgiven      uint64 // datagrams taken as lost on a stall
	lastSend      time.Time
	txCalls       uint64 // used by Send only
	txBuffers     uint64 // used by Send only
	rxCalls       atomic.Uint64
	rxBuffers     atomic.Uint64
}

// Open binds both sockets and starts receiving.
func Open(o Options) (*Flow, error) {
	if o.Batch == 0 {
		o.Batch = 64
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 20 * time.Millisecond
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	network := "udp4"
	if o.To.Addr().Unmap().Is6() {
		network = "udp6"
	}
	rx, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(o.To))
	if err != nil {
		return nil, fmt.Errorf("udpbaseline: %w", err)
	}
	// As roce/udpconn: 8 MiB, forced past net.core.rmem_max where the
	// process may (CAP_NET_ADMIN).
	_ = rx.SetReadBuffer(8 << 20)
	_ = forceBuffer(rx, true, 8<<20)
	tx, err := net.DialUDP(network, net.UDPAddrFromAddrPort(o.From), rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		rx.Close()
		return nil, fmt.Errorf("udpbaseline: %w", err)
	}
	_ = tx.SetWriteBuffer(4 << 20)
	_ = forceBuffer(tx, false, 4<<20)
	// The kernel's batching, as roce/udpconn's: the flow measures what
	// reliability costs, not what the offload gives.
	off := udpconn.Offload{NoGSO: "turned off (Options.NoGSO)", NoGRO: "turned off (Options.NoGRO)"}
	if !o.NoGSO {
		if err := probeGSO(tx); err != nil {
			off.NoGSO = "UDP_SEGMENT: " + err.Error()
		} else {
			off.GSO, off.NoGSO = true, ""
		}
	}
	if !o.NoGRO {
		if err := enableGRO(rx); err != nil {
			off.NoGRO = "UDP_GRO: " + err.Error()
		} else {
			off.GRO, off.NoGRO = true, ""
		}
	}
	var f *Flow
	if network == "udp4" {
		f = newFlow(o, ipv4.NewPacketConn(rx), ipv4.NewPacketConn(tx), off)
	} else {
		f = newFlow(o, ipv6.NewPacketConn(rx), ipv6.NewPacketConn(tx), off)
	}
	f.rx, f.tx, f.closers = rx, tx, []io.Closer{tx, rx}
	f.start()
	return f, nil
}

// newFlow makes the flow over rxb and txb, with checked options and the
// offload the sockets have; start starts its receiving goroutine.
func newFlow(o Options, rxb, txb batchConn, off udpconn.Offload) *Flow {
	per := uint64((o.Size + o.Datagram - 1) / o.Datagram)
	f := &Flow{opts: o, perMsg: per, window: min(uint64(o.Window)*per, MaxInflight), rxb: rxb, txb: txb,
		progress: make(chan struct{}, 1), stall: time.NewTimer(o.StallTimeout),
		gso: off.GSO, gro: off.GRO, noGSO: off.NoGSO, noGRO: off.NoGRO}
	f.stall.Stop()
	dgram := min(o.Size, o.Datagram)
	f.big = make([]byte, dgram*f.segments())
	f.segCtl = segmentControl(dgram)
	f.out = make([]ipv4.Message, o.Batch)
	for i := range f.out {
		f.out[i].Buffers = make([][]byte, 1)
	}
	return f
}

// segments is the most datagrams one send carries: with GSO as many as
// maxSegments and maxGSOBytes allow, else one.
func (f *Flow) segments() int {
	if !f.gso {
		return 1
	}
	return max(1, min(maxSegments, maxGSOBytes/min(f.opts.Size, f.opts.Datagram)))
}

// Offload says which of the kernel's UDP batching the flow's sockets use.
func (f *Flow) Offload() udpconn.Offload {
	return udpconn.Offload{GSO: f.gso, GRO: f.gro, NoGSO: f.noGSO, NoGRO: f.noGRO}
}

// start starts the receiving goroutine, with its buffers made first: a
// window may arrive before a goroutine that made 64 KiB ones would read.
func (f *Flow) start() {
	dgram := min(f.opts.Size, f.opts.Datagram)
	if f.gro {
		dgram = 1 << 16
	}
	in := make([]ipv4.Message, f.opts.Batch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, dgram)}
		in[i].OOB = make([]byte, 64)
	}
	f.wg.Add(1)
	go f.routineReceive(in)
}

// LocalAddrs returns the sending and the receiving socket's addresses.
// It is for flows made by Open.
func (f *Flow) LocalAddrs() (from, to netip.AddrPort) {
	return f.tx.LocalAddr().(*net.UDPAddr).AddrPort(), f.rx.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Received returns the datagrams received so far.
func (f *Flow) Received() uint64 { return f.received.Load() }

// routineReceive reads batches into in until the receiving socket
// closes. With GRO a buffer holds a GSO send's datagrams (64 KiB), and
// counts as the datagrams in it.
func (f *Flow) routineReceive(in []ipv4.Message) {
	defer f.wg.Done()
	for {
		n, err := f.rxb.ReadBatch(in, 0)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				f.rxErr.Store(&err)
			}
			f.wake()
			return
		}
		got := uint64(n)
		if f.gro {
			got = 0
			for _, m := range in[:n] {
				if seg := groSegment(m.OOB[:m.NN]); seg > 0 {
					got += uint64((m.N + seg - 1) / seg)
				} else {
					got++
				}
			}
		}
		f.lastArrival.Store(time.Now().UnixNano())
		f.rxCalls.Add(1)
		f.rxBuffers.Add(uint64(n))
		f.received.Add(got)
		f.wake()
	}
}

func (f *Flow) wake() {
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// outstanding is the datagrams sent and neither received nor taken as lost.
func (f *Flow) outstanding() uint64 {
	done := f.received.Load() + f.forgiven
	return f.sent - min(done, f.sent)
}

// Send sends msgs messages, in batches, waiting while the window is full.
func (f *Flow) Send(ctx context.Context, msgs int) error {
	target := f.written + uint64(msgs)*f.perMsg
	f.written = target
	for f.sent < target {
		room := f.window - min(f.outstanding(), f.window)
		if room == 0 {
			stalled, err := f.wait(ctx)
			if err != nil {
				return err
			}
			if stalled {
				f.forgiven += f.outstanding()
			}
			continue
		}
		sends, dgrams := f.prepare(min(room, target-f.sent))
		w, err := f.txb.WriteBatch(f.out[:sends], 0)
		if err != nil && f.gso && isGSORefused(err) && w <= 0 {
			f.gso, f.noGSO = false, "a send failed with EIO: the route takes no segmentation offload"
			continue
		}
		if err != nil {
			return fmt.Errorf("udpbaseline: sendmmsg: %w", err)
		}
		f.txCalls++
		f.txBuffers += uint64(w)
		if w == sends {
			f.sent += dgrams
		} else {
			f.sent += uint64(w * f.segments())
		}
		f.lastSend = time.Now()
	}
	return nil
}

// prepare fills the flow's sends with up to n datagrams, as few sends as
// GSO allows (f.segments a send), and returns the sends and datagrams.
func (f *Flow) prepare(n uint64) (sends int, dgrams uint64) {
	per := uint64(f.segments())
	dgram := min(f.opts.Size, f.opts.Datagram)
	for sends < len(f.out) && dgrams < n {
		k := min(per, n-dgrams)
		m := &f.out[sends]
		m.Buffers[0] = f.big[:int(k)*dgram]
		m.OOB = nil
		if k > 1 {
			m.OOB = f.segCtl
		}
		dgrams += k
		sends++
	}
	return sends, dgrams
}

// wait waits until datagrams arrive (or arrived since the last wait),
// StallTimeout passes with none (stalled) or ctx ends.
func (f *Flow) wait(ctx context.Context) (stalled bool, err error) {
	f.stall.Reset(f.opts.StallTimeout)
	defer f.stall.Stop()
	select {
	case <-f.progress:
		if e := f.rxErr.Load(); e != nil {
			return false, fmt.Errorf("udpbaseline: recvmmsg: %w", *e)
		}
		return false, nil
	case <-f.stall.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Drain waits for the datagrams in flight until all arrived or none did for
// the stall timeout, and returns what the flow moved.
func (f *Flow) Drain(ctx context.Context) (Result, error) {
	for f.received.Load() < f.sent {
		stalled, err := f.wait(ctx)
		if err != nil {
			return Result{}, err
		}
		if stalled {
			break // the rest is lost
		}
	}
	r := Result{Sent: f.sent, Received: f.received.Load(), End: f.lastSend,
		TxCalls: f.txCalls, RxCalls: f.rxCalls.Load(), TxBuffers: f.txBuffers, RxBuffers: f.rxBuffers.Load()}
	r.Messages = min(r.Received, r.Sent) / f.perMsg
	if a := time.Unix(0, f.lastArrival.Load()); a.After(r.End) {
		r.End = a
	}
	return r, nil
}

// Close closes both sockets and stops the receiving goroutine; it is
// idempotent.
func (f *Flow) Close() error {
	f.closeOnce.Do(func() {
		for _, c := range f.closers {
			f.closeErr = errors.Join(f.closeErr, c.Close())
		}
		f.wg.Wait()
	})
	return f.closeErr
}
