package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// DeviceOptions configures a Device.
type DeviceOptions struct {
	// RxBatch is how many packets one read takes at most (default 32, at
	// most MaxRxBatch).
	RxBatch int
	// CNPInterval is the least time between two CNPs sent for one QP
	// (DCQCN's notification point; default 50 microseconds).
	CNPInterval time.Duration
	// NoCNP leaves ECN-CE marked packets unanswered: set it when the packet
	// I/O answers them itself (package xdp's program with CNPs on), so a
	// congested flow gets one CNP, not two.
	NoCNP bool
	// DCQCN configures the reaction point of QPs that send ECN-capable
	// packets (QPAttr.ECN); zero fields take the published defaults.
	DCQCN DCQCNConfig
	// IdleWake is how long the receive goroutine waits for packets at
	// most before it goes round its loop anyway (default 1 s), when the
	// conn can stop waiting (roce.ReadDeadliner): its heartbeat
	// (ReceiveHeartbeat) then ages only when the loop is stuck.
	IdleWake time.Duration
	// Logger receives the device's events (default slog.Default()).
	Logger *slog.Logger
	// ResponseBudget is the most READ response packets a QP sends in one
	// go before it yields the device's receive loop (0: the default,
	// ResponseBudget; -1: never, the whole of what is ready in one go).
	ResponseBudget int
	// Polled starts no goroutine to read the conn: the caller's Poll
	// reads what has arrived, without waiting, and hands it on as the
	// receive goroutine would (a busy-polled leg, whose one loop then
	// takes a packet from the socket to its QP, its session and the far
	// leg on one thread). The conn must be a TryReader, or a TryLender
	// when it lends its frames (AF_XDP over the pool).
	Polled bool
	// Queue and Queues: the device is queue Queue of Queues devices on
	// one address (NewDevices sets them: a userspace leg's receive
	// loops, each on its own socket of a group that the kernel steers
	// by destination QP). It numbers its QPs so that roce.QueueOf gives
	// Queue, so their packets reach its own conn. Zero: the only one.
	Queue, Queues int
}

// MaxRxBatch is the largest DeviceOptions.RxBatch: each packet of a batch
// has a MaxPacket buffer of its own.
const MaxRxBatch = 1024

// Stats counts a device's packets; all fields are updated atomically.
type Stats struct {
	RxPackets, TxPackets          atomic.Uint64
	RxMalformed, RxUnknownQP      atomic.Uint64
	RxDuplicate, RxOutOfSequence  atomic.Uint64
	TxNAKs, TxRNRNAKs, Retransmit atomic.Uint64
	Timeouts                      atomic.Uint64
	TailProbes                    atomic.Uint64 // tail-loss probes sent (either stage, and probes resent unanswered) before the ACK timeout
	RxCNPs, TxCNPs, RxECNCE       atomic.Uint64
	RateCuts                      atomic.Uint64 // DCQCN rate cuts the CNPs caused (at most one per QP per ReducePeriod)
	UDDropped                     atomic.Uint64
	// RxForeign counts packets that reached this device's conn for a QP
	// another device of the address serves (NewDevices), handed to that
	// QP here: the kernel's GRO joined them with a flow's packets of this
	// queue, they came before the steering was in place, or the NIC's RSS
	// put them here (AF_XDP) before the QP moved to this device.
	RxForeign atomic.Uint64
	// QPsMovedIn counts the RC QPs this device took over from another
	// device of the address, their packets arriving here (move.go).
	QPsMovedIn atomic.Uint64
	// ReadYields counts the times a QP's stream of READ responses gave
	// its device's receive loop its turn (ResponseBudget).
	ReadYields  atomic.Uint64
	CQOverflows atomic.Uint64 // completions that found their CQ full
	EventsLost  atomic.Uint64 // async events nobody took before the queue filled
	// TxNAKCodes and RxNAKCodes count the NAKs sent and received by code
	// (the AETH's: 0 PSN sequence error, 1 invalid request, 2 remote
	// access error, 3 remote operational error, 4 invalid RD request);
	// ErrorCompletions counts completions by their failed status.
	TxNAKCodes, RxNAKCodes [NAKCodes]atomic.Uint64
	ErrorCompletions       [NumStatuses]atomic.Uint64
}

// NAKCodes is how many NAK codes the counters keep (0 to 4, IBTA 9.7.5.2.4).
const NAKCodes = 5

// NumStatuses is how many completion statuses there are.
const NumStatuses = int(StatusRNRRetryExcErr) + 1

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	RxPackets, TxPackets, RxMalformed, RxUnknownQP, RxDuplicate, RxOutOfSequence uint64
	TxNAKs, TxRNRNAKs, Retransmit, Timeouts, TailProbes                          uint64
	RxCNPs, TxCNPs, RxECNCE, RateCuts, UDDropped, CQOverflows, EventsLost        uint64
	RxForeign, QPsMovedIn, ReadYields                                            uint64
	TxNAKCodes, RxNAKCodes                                                       [NAKCodes]uint64
	ErrorCompletions                                                             [NumStatuses]uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	out := StatsSnapshot{RxPackets: s.RxPackets.Load(), TxPackets: s.TxPackets.Load(), RxMalformed: s.RxMalformed.Load(),
		RxUnknownQP: s.RxUnknownQP.Load(), RxDuplicate: s.RxDuplicate.Load(), RxOutOfSequence: s.RxOutOfSequence.Load(),
		TxNAKs: s.TxNAKs.Load(), TxRNRNAKs: s.TxRNRNAKs.Load(), Retransmit: s.Retransmit.Load(), Timeouts: s.Timeouts.Load(),
		TailProbes: s.TailProbes.Load(), RxCNPs: s.RxCNPs.Load(), TxCNPs: s.TxCNPs.Load(), RxECNCE: s.RxECNCE.Load(),
		RateCuts: s.RateCuts.Load(), UDDropped: s.UDDropped.Load(), CQOverflows: s.CQOverflows.Load(), EventsLost: s.EventsLost.Load(),
		RxForeign: s.RxForeign.Load(), QPsMovedIn: s.QPsMovedIn.Load(), ReadYields: s.ReadYields.Load()}
	for i := range NAKCodes {
		out.TxNAKCodes[i], out.RxNAKCodes[i] = s.TxNAKCodes[i].Load(), s.RxNAKCodes[i].Load()
	}
	for i := range NumStatuses {
		out.ErrorCompletions[i] = s.ErrorCompletions[i].Load()
	}
	return out
}

// Add adds o's counts to s's (the devices of one address, summed).
func (s *StatsSnapshot) Add(o StatsSnapshot) {
	s.RxPackets += o.RxPackets
	s.TxPackets += o.TxPackets
	s.RxMalformed += o.RxMalformed
	s.RxUnknownQP += o.RxUnknownQP
	s.RxDuplicate += o.RxDuplicate
	s.RxOutOfSequence += o.RxOutOfSequence
	s.TxNAKs += o.TxNAKs
	s.TxRNRNAKs += o.TxRNRNAKs
	s.Retransmit += o.Retransmit
	s.Timeouts += o.Timeouts
	s.TailProbes += o.TailProbes
	s.RxCNPs += o.RxCNPs
	s.TxCNPs += o.TxCNPs
	s.RxECNCE += o.RxECNCE
	s.RateCuts += o.RateCuts
	s.UDDropped += o.UDDropped
	s.CQOverflows += o.CQOverflows
	s.EventsLost += o.EventsLost
	s.RxForeign += o.RxForeign
	s.QPsMovedIn += o.QPsMovedIn
	s.ReadYields += o.ReadYields
	for i := range NAKCodes {
		s.TxNAKCodes[i] += o.TxNAKCodes[i]
		s.RxNAKCodes[i] += o.RxNAKCodes[i]
	}
	for i := range NumStatuses {
		s.ErrorCompletions[i] += o.ErrorCompletions[i]
	}
}

// AsyncEventType is the kind of an asynchronous event.
type AsyncEventType uint8

// Asynchronous events (IBV_EVENT_*).
const (
	// EventCQError: a completion found its CQ full; the QP is in ERR.
	EventCQError AsyncEventType = iota + 1
)

func (t AsyncEventType) String() string {
	if t == EventCQError {
		return "CQ error"
	}
	return fmt.Sprintf("AsyncEventType(%d)", t)
}

// AsyncEvent is an asynchronous event of a device (ibv_get_async_event).
type AsyncEvent struct {
	Type AsyncEventType
	QPN  uint32
	Err  error
}

// asyncEventQueue is how many events wait for AsyncEvent; beyond it they
// are counted in Stats.EventsLost.
const asyncEventQueue = 64

// Device is a userspace RoCEv2 device: one packet conn and the queue pairs
// that send and receive through it.
type Device struct {
	conn roce.PacketConn
	opts DeviceOptions
	log  *slog.Logger
	// budget is the READ responses a QP sends before it yields (-1:
	// never; DeviceOptions.ResponseBudget).
	budget int

	mu      sync.RWMutex // guards qps, moved, nextQPN and groups
	qps     map[uint32]*QP
	moved   map[uint32]*QP // other devices' QPs this one serves (move.go)
	nextQPN uint32
	groups  map[netip.Addr]*mgroup // the multicast groups QPs are attached to (mcast.go)

	// txMu serializes conn.WriteBatch. Lock order: txMu before QP.mu
	// (send holds txMu while it takes a QP's packets under QP.mu); never
	// take txMu while holding a QP.mu: code under QP.mu queues packets in
	// QP.tx and calls send after unlocking.
	txMu sync.Mutex

	closed   chan struct{}
	closeErr error
	once     sync.Once
	wg       sync.WaitGroup

	stats  Stats
	events chan AsyncEvent
	// beat is when routineReceive last went round its loop (UnixNano);
	// wakes says the loop wakes while idle (its conn's read deadline).
	beat  atomic.Int64
	wakes atomic.Bool

	// pollMu is held by Poll (a polled device's reader), so that Close
	// waits out a Poll under way; rx is the reader's scratch.
	pollMu sync.Mutex
	try    TryReader
	// tryLent is a polled device's conn when it lends its frames; Poll
	// hands them back after each batch (pollFrames is its scratch).
	tryLent    TryLender
	pollFrames []uint64
	rx         rxScratch

	// queues are the devices of one address, this one among them, in
	// queue order (NewDevices); nil for a device alone. Set before its
	// reader starts, never changed.
	queues []*Device

	// after are AfterReceived's functions, run by the reader once it has
	// read what its conn held; afterSet says there are some.
	afterMu  sync.Mutex
	after    []func()
	afterSet atomic.Bool
	// waits says the receive goroutine waits on its conn, or is about to,
	// having found no function queued: AfterReceived then ends its wait
	// with a deadline (drainAfter).
	waits atomic.Bool
}

// afterDrainBatches bounds how many batches a reader reads before it runs
// AfterReceived's functions: what a busy conn held then, not what keeps
// arriving.
const afterDrainBatches = 256

// rxScratch is what reading a batch needs: the messages, a decoder, and
// the QPs the batch touched. One reader uses it (routineReceive or Poll).
type rxScratch struct {
	msgs    []roce.Message
	pkt     roce.Packet
	touched map[*QP]struct{}
}

func newRxScratch(batch int, buffers bool) rxScratch {
	rx := rxScratch{msgs: make([]roce.Message, batch), touched: make(map[*QP]struct{})}
	if buffers {
		for i := range rx.msgs {
			rx.msgs[i].Buf = make([]byte, roce.MaxPacket)
		}
	}
	return rx
}

// NewDevice starts a device on conn. Close stops it and closes conn.
func NewDevice(conn roce.PacketConn, opts DeviceOptions) (*Device, error) {
	if opts.Queue != 0 || opts.Queues > 1 {
		return nil, errors.New("transport: new device: queue and queues are NewDevices'")
	}
	d, err := newDevice(conn, opts)
	if err != nil {
		return nil, err
	}
	d.start()
	return d, nil
}

// NewDevices starts a device on each of conns, the queues of one address
// (udpconn.ListenQueues), conns[i] receiving queue i of len(conns)
// (roce.QueueOf): each numbers its QPs for its own queue, and has a
// receive loop of its own that takes no lock another device's takes,
// unless a packet reached it for another device's QP (counted
// Stats.RxForeign), which it hands to that QP as its owner would. Each
// device's Close stops it and closes its conn; on an error, conns are
// closed.
func NewDevices(conns []roce.PacketConn, opts DeviceOptions) ([]*Device, error) {
	if len(conns) == 0 || len(conns) > roce.MaxQueues {
		closeConns(conns)
		return nil, fmt.Errorf("transport: new devices: %d conns: want 1 to %d", len(conns), roce.MaxQueues)
	}
	devs := make([]*Device, len(conns))
	for i, c := range conns {
		o := opts
		o.Queue, o.Queues = i, len(conns)
		if len(conns) == 1 {
			o.Queues = 0
		}
		d, err := newDevice(c, o)
		if err != nil {
			closeConns(conns)
			return nil, fmt.Errorf("transport: new devices: queue %d: %w", i, err)
		}
		devs[i] = d
	}
	if len(devs) > 1 {
		for _, d := range devs {
			d.queues = devs
		}
	}
	for _, d := range devs {
		d.start()
	}
	return devs, nil
}

func closeConns(conns []roce.PacketConn) {
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
}

// newDevice makes a device on conn; start starts its reader.
func newDevice(conn roce.PacketConn, opts DeviceOptions) (*Device, error) {
	if conn == nil {
		return nil, errors.New("transport: new device: nil packet conn")
	}
	if opts.RxBatch <= 0 {
		opts.RxBatch = 32
	}
	if opts.RxBatch > MaxRxBatch {
		return nil, fmt.Errorf("transport: new device: a receive batch of %d packets, more than %d", opts.RxBatch, MaxRxBatch)
	}
	if opts.CNPInterval <= 0 {
		opts.CNPInterval = 50 * time.Microsecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.IdleWake <= 0 {
		opts.IdleWake = time.Second
	}
	if opts.Queues > 1 && (opts.Queue < 0 || opts.Queue >= opts.Queues) {
		return nil, fmt.Errorf("transport: new device: queue %d of %d", opts.Queue, opts.Queues)
	}
	if opts.ResponseBudget < -1 {
		return nil, fmt.Errorf("transport: new device: a READ response budget of %d packets (want -1, 0 or more)", opts.ResponseBudget)
	}
	log := opts.Logger.With("conn", conn.LocalAddr().String())
	if opts.Queues > 1 {
		log = log.With("queue", opts.Queue)
	}
	d := &Device{
		conn:    conn,
		opts:    opts,
		log:     log,
		qps:     make(map[uint32]*QP),
		nextQPN: 0x11, // QPNs 0 and 1 are the special QPs
		closed:  make(chan struct{}),
		events:  make(chan AsyncEvent, asyncEventQueue),
		budget:  opts.ResponseBudget,
	}
	if d.budget == 0 {
		d.budget = ResponseBudget
	}
	d.beat.Store(time.Now().UnixNano())
	if opts.Polled {
		if fl, lends := conn.(roce.FrameLender); lends && fl.LendsFrames() {
			tl, ok := conn.(TryLender)
			if !ok {
				return nil, errors.New("transport: new device: polled, on a conn that lends its frames but cannot read without waiting")
			}
			d.tryLent, d.rx = tl, newRxScratch(opts.RxBatch, false)
		} else {
			try, ok := conn.(TryReader)
			if !ok {
				return nil, errors.New("transport: new device: polled, on a conn that cannot read without waiting")
			}
			d.try, d.rx = try, newRxScratch(opts.RxBatch, true)
		}
		d.wakes.Store(true) // Poll beats on every call
		return d, nil
	}
	_, wakes := conn.(roce.ReadDeadliner)
	d.wakes.Store(wakes)
	return d, nil
}

// start starts the receive goroutine of a device that is not polled.
func (d *Device) start() {
	if d.opts.Polled {
		return
	}
	d.wg.Add(1)
	go d.routineReceive()
}

// Queue returns the device's queue and how many devices share its
// address (NewDevices); 0 and 1 for a device alone.
func (d *Device) Queue() (int, int) {
	return d.opts.Queue, max(d.opts.Queues, 1)
}

// Poll reads the packets a polled device's conn holds now (DeviceOptions.
// Polled), without waiting, hands each to its QP and sends what they
// queued, as the receive goroutine of a device that is not polled does;
// it returns how many packets it read, and roce.ErrConnClosed once the
// device is closed. Targets' Requests and Flushes run on the caller's
// goroutine. One goroutine calls it at a time; Close waits for a Poll
// under way.
func (d *Device) Poll() (int, error) {
	d.pollMu.Lock()
	defer d.pollMu.Unlock()
	select {
	case <-d.closed:
		return 0, roce.ErrConnClosed
	default:
	}
	if d.try == nil && d.tryLent == nil {
		return 0, errors.New("transport: poll: the device is not polled (DeviceOptions.Polled)")
	}
	d.beat.Store(time.Now().UnixNano())
	// AfterReceived's functions run once a read finds the conn held less
	// than a batch: it is empty now, and all it held is handled.
	after := d.afterSet.Load()
	n, frames, err := d.readNow(&d.rx, d.pollFrames, d.tryLent, d.try)
	d.pollFrames = frames
	if after && (err != nil || n < len(d.rx.msgs)) {
		d.runAfter()
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}

// AfterReceived has fn run by the device's reader (its receive goroutine,
// or Poll) once it has handled every packet its conn held when
// AfterReceived was called, and what it was handling then: the order of
// the wire across the devices of one address (NewDevices). A peer's
// DREQ reaches queue 0's device, while the ACKs its QP sent just before
// may still wait in another queue's socket; the CM releases the
// connection after them, so that the DREQ flushes only what was not
// acknowledged. fn must not block. On a closed device, or a conn that can
// neither be woken nor read without waiting (a test's), fn runs at once.
func (d *Device) AfterReceived(fn func()) {
	select {
	case <-d.closed:
		fn()
		return
	default:
	}
	if !d.defers() {
		fn()
		return
	}
	dl, _ := d.conn.(roce.ReadDeadliner)
	d.afterMu.Lock()
	d.after = append(d.after, fn)
	d.afterMu.Unlock()
	d.afterSet.Store(true)
	if !d.opts.Polled && d.waits.Load() {
		// A past deadline ends the reader's wait; it reads the rest
		// without waiting, then runs fn. A reader not waiting (handling
		// a batch: a READ's stream yielding from the loop itself) looks
		// for fn before it waits again (drainAfter).
		_ = dl.SetReadDeadline(time.Now())
	}
	select {
	case <-d.closed:
		d.runAfter() // the reader may have gone already
	default:
	}
}

// AfterAllReceived is AfterReceived on every device of d's address (the
// devices NewDevices made together, d among them; d alone otherwise): fn
// runs once, on the reader of whichever finishes last, after each has
// handled what its conn held. Where the NIC's RSS, not the QPN, decides
// which queue a packet reaches (AF_XDP), the ACK a peer sent before its
// DREQ may wait in any queue, not only in its QP's device's.
func (d *Device) AfterAllReceived(fn func()) {
	devs := d.queues
	if devs == nil {
		devs = []*Device{d}
	}
	var left atomic.Int32
	left.Store(int32(len(devs)))
	for _, o := range devs {
		o.AfterReceived(func() {
			if left.Add(-1) == 0 {
				fn()
			}
		})
	}
}

// runAfter runs AfterReceived's functions queued so far.
func (d *Device) runAfter() {
	d.afterMu.Lock()
	fns := d.after
	d.after = nil
	d.afterSet.Store(false)
	d.afterMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// defers reports whether AfterReceived defers its function to d's reader
// (a polled device, or a conn whose wait a deadline ends and that reads
// without waiting), rather than running it at once.
func (d *Device) defers() bool {
	if d.opts.Polled {
		return true
	}
	_, wakes := d.conn.(roce.ReadDeadliner)
	_, try := d.conn.(TryReader)
	_, tryLent := d.conn.(TryLender)
	return wakes && (try || tryLent)
}

// drainAfter is the receive goroutine's part of AfterReceived: with
// functions queued, it reads without waiting until the conn is empty (at
// most afterDrainBatches), hands each batch on, then runs them; and again
// while they queued more (a READ's stream yielding again). It returns
// with d.waits set, the goroutine about to wait on its conn: from then
// on AfterReceived wakes it with a deadline.
func (d *Device) drainAfter(rx *rxScratch, frames []uint64) []uint64 {
	for {
		// AfterReceived sets afterSet, then reads waits; here waits is
		// set, then afterSet read: one of the two sees the other's.
		d.waits.Store(true)
		if !d.afterSet.Load() {
			return frames
		}
		d.waits.Store(false)
		tl, lend := d.conn.(TryLender)
		if !lend || !tl.LendsFrames() {
			tl = nil
		}
		tr, _ := d.conn.(TryReader)
		dl, _ := d.conn.(roce.ReadDeadliner)
		for range afterDrainBatches {
			var n int
			var err error
			n, frames, err = d.readNow(rx, frames, tl, tr)
			if errors.Is(err, os.ErrDeadlineExceeded) && dl != nil && !d.opts.Polled {
				// AfterReceived's wake-up, set as this goroutine stopped
				// waiting (it saw waits still set): a read that does not
				// wait fails on it too, with the conn still holding
				// packets. The wait it was for is over: read on.
				if dl.SetReadDeadline(time.Now().Add(d.opts.IdleWake)) == nil {
					n, frames, err = d.readNow(rx, frames, tl, tr)
				}
			}
			if err != nil || n == 0 {
				break
			}
		}
		d.runAfter()
	}
}

// readNow reads what the conn holds without waiting, up to a batch, by
// tl when the conn lends its frames (which go back after the batch,
// frames its scratch) or else by tr, and hands the batch on.
func (d *Device) readNow(rx *rxScratch, frames []uint64, tl TryLender, tr TryReader) (int, []uint64, error) {
	var n int
	var err error
	switch {
	case tl != nil:
		n, err = tl.TryReadBatchLent(rx.msgs)
	case tr != nil:
		n, err = tr.TryReadBatch(rx.msgs)
	}
	if err != nil || n == 0 {
		return 0, frames, err
	}
	d.handleBatch(rx, n)
	if tl != nil {
		frames = appendLent(frames[:0], rx.msgs[:n])
		tl.ReturnFrames(frames)
	}
	return n, frames, nil
}

// ReceiveHeartbeat returns when the receive goroutine last went round its
// loop (a batch handed to its QPs and their packets sent, or a wait for
// packets that timed out), and whether the conn wakes it while nothing
// arrives (a roce.ReadDeadliner: at least every IdleWake). Only then does
// an old heartbeat mean a stuck loop, and not a quiet link.
func (d *Device) ReceiveHeartbeat() (last time.Time, wakes bool) {
	return time.Unix(0, d.beat.Load()), d.wakes.Load()
}

// Stats returns the device's counters.
func (d *Device) Stats() *Stats { return &d.stats }

// NumQPs returns how many QPs the device has (QP 1 among them): created
// and not yet destroyed.
func (d *Device) NumQPs() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.qps)
}

// RateLimitedQPs returns how many of the device's QPs DCQCN holds below
// their line rate now (QPStats.Limited).
func (d *Device) RateLimitedQPs() int {
	n := 0
	for _, qp := range d.listQPs(false) {
		if qp.Stats().Limited {
			n++
		}
	}
	return n
}

// LocalAddr returns the address of the device's packet conn.
func (d *Device) LocalAddr() netip.AddrPort { return d.conn.LocalAddr() }

// Close moves every QP to the error state (flushing its work requests),
// stops the receive goroutine and closes the conn. Once it returns nothing
// reads or writes the memory of the device's MRs any more (a send under way,
// from a timer's retransmission or a post, has finished, and none starts),
// so that memory may be unmapped. It is idempotent.
func (d *Device) Close() error {
	d.once.Do(func() {
		close(d.closed)
		d.sendHome()  // the QPs d took over: their own devices send them
		d.bringHome() // d's QPs another device took over: d's Close stops them
		for _, qp := range d.listQPs(false) {
			_ = qp.Close()
		}
		d.closeErr = d.conn.Close()
		d.mu.Lock()
		d.closeGroupsLocked()
		d.mu.Unlock()
		d.txMu.Lock() // wait out a send under way; later ones see closed
		d.txMu.Unlock()
		d.pollMu.Lock() // and a Poll under way; later ones see closed
		d.pollMu.Unlock()
		d.wg.Wait()
		d.runAfter() // what the reader left: nothing reads any more
	})
	return d.closeErr
}

// AsyncEvent returns the next asynchronous event, waiting for one until ctx
// ends or the device is closed.
func (d *Device) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select {
	case ev := <-d.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-d.events:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	case <-d.closed:
		return AsyncEvent{}, fmt.Errorf("transport: async event: device closed")
	}
}

// event queues an asynchronous event without blocking.
func (d *Device) event(ev AsyncEvent) {
	select {
	case d.events <- ev:
	default:
		d.stats.EventsLost.Add(1)
		d.log.Error("async event queue full: event lost", "event", ev.Type.String(), "qp", ev.QPN)
	}
}

// reachable checks that the device's conn can send to addr: an address of
// the conn's own family (an IPv4-mapped IPv6 address counts as IPv4). A
// conn without an address (a test's) reaches everything.
func (d *Device) reachable(addr netip.AddrPort) error {
	local := d.conn.LocalAddr().Addr().Unmap()
	if !local.IsValid() || local.Is4() == addr.Addr().Unmap().Is4() {
		return nil
	}
	return fmt.Errorf("%v is unreachable from the device's %v: %w", addr, d.conn.LocalAddr(), roce.ErrAddrFamily)
}

// listQPs returns d's own QPs, or with moved those it took over
// (move.go), as they are now, read under d.mu, for work done on them
// without it.
func (d *Device) listQPs(moved bool) []*QP {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := d.qps
	if moved {
		m = d.moved
	}
	qps := make([]*QP, 0, len(m))
	for _, qp := range m {
		qps = append(qps, qp)
	}
	return qps
}

// lookupQP returns the QP numbered qpn that d serves: one of its own, or
// one it took over (move.go).
func (d *Device) lookupQP(qpn uint32) *QP {
	d.mu.RLock()
	qp := d.qps[qpn]
	if qp == nil && d.moved != nil {
		if qp = d.moved[qpn]; qp != nil && qp.gone.Load() {
			qp = nil
		}
	}
	d.mu.RUnlock()
	return qp
}

// routineReceive reads packets, decodes them and hands each to its QP. After
// each batch it sends what the QPs queued (coalesced ACKs among them).
func (d *Device) routineReceive() {
	defer d.wg.Done()
	// A conn that lends its frames (AF_XDP over the pool) leaves packets
	// where they landed; they go back after the batch, and a target that
	// keeps a payload holds the frame's memory itself (Request.Frame).
	fl, lend := d.conn.(roce.FrameLender)
	lend = lend && fl.LendsFrames()
	rx := newRxScratch(d.opts.RxBatch, !lend)
	msgs := rx.msgs
	var frames []uint64
	// A conn that can stop waiting gets a deadline IdleWake ahead, set
	// again once half of it passed: the loop wakes while nothing arrives,
	// and a deadline never falls due before a read begins.
	dl, wakes := d.conn.(roce.ReadDeadliner)
	var renew time.Time
	for {
		now := time.Now()
		d.beat.Store(now.UnixNano())
		if wakes && !now.Before(renew) {
			if err := dl.SetReadDeadline(now.Add(d.opts.IdleWake)); err != nil {
				d.log.Warn("receive: set the conn's read deadline: the loop waits without one", "err", err)
				wakes = false
				d.wakes.Store(false)
			}
			renew = now.Add(d.opts.IdleWake / 2)
		}
		// After the deadline, so that AfterReceived's wake-up (a
		// deadline now) is either seen here or ends the read below.
		frames = d.drainAfter(&rx, frames)
		var n int
		var err error
		if lend {
			n, err = fl.ReadBatchLent(msgs)
		} else {
			n, err = d.conn.ReadBatch(msgs)
		}
		d.waits.Store(false)
		if err != nil {
			select {
			case <-d.closed:
				return
			default:
			}
			if errors.Is(err, roce.ErrConnClosed) {
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				renew = time.Time{} // idle: the loop went round
				continue
			}
			d.log.Warn("read packets", "err", err)
			time.Sleep(time.Millisecond)
			continue
		}
		d.handleBatch(&rx, n)
		if lend {
			frames = appendLent(frames[:0], msgs[:n])
			fl.ReturnFrames(frames)
		}
	}
}

// appendLent appends the frames of the lent messages of msgs to frames: a
// conn that lends may also hand out a packet it did not lend (udpconn's,
// read into its own memory when no frame was free).
func appendLent(frames []uint64, msgs []roce.Message) []uint64 {
	for i := range msgs {
		if msgs[i].Lent {
			frames = append(frames, msgs[i].Frame)
		}
	}
	return frames
}

// handleBatch decodes the first n of rx's messages and hands each to its
// QP; then, for each QP the batch touched, it flushes the target, sends
// what the QP queued (coalesced ACKs among them) and signals its CQs.
func (d *Device) handleBatch(rx *rxScratch, n int) {
	pkt := &rx.pkt
	for i := range n {
		m := &rx.msgs[i]
		d.stats.RxPackets.Add(1)
		if err := pkt.Decode(m.Buf[:m.N]); err != nil {
			d.stats.RxMalformed.Add(1)
			continue
		}
		if pkt.Opcode() == roce.CNP {
			d.stats.RxCNPs.Add(1)
		}
		qp := d.lookupQP(pkt.BTH.DestQP())
		if qp == nil && d.queues != nil {
			// Another queue's QP: handed to it here, under its lock.
			if o := d.queues[roce.QueueOf(pkt.BTH.DestQP(), len(d.queues))]; o != d {
				qp = o.lookupQP(pkt.BTH.DestQP())
			}
		}
		if qp == nil {
			d.stats.RxUnknownQP.Add(1)
			continue
		}
		if d.queues != nil {
			if qp.txDev.Load() != d {
				d.stray(qp) // and, its packets arriving here, it may move here
			} else {
				qp.served()
			}
		}
		if m.ECN == roce.ECNCE {
			d.stats.RxECNCE.Add(1)
		}
		qp.receive(pkt, m)
		rx.touched[qp] = struct{}{}
	}
	for qp := range rx.touched {
		if f, ok := qp.target.(Flusher); ok {
			f.Flush()
		}
		qp.flushAcks()
		qp.send() // by the device that serves it, d or another
		qp.signalCQs()
		delete(rx.touched, qp)
	}
}

// ResponseBudget is the most READ response packets one call sends for a
// QP (a burst: 256 KiB at MTU 4096; DeviceOptions.ResponseBudget), where
// its device can take the rest up later: then, with more ready, the QP
// gives its device's receive loop its turn (AfterReceived) and the loop
// sends the rest after what arrived meanwhile. A large READ whose data
// completed at once (a verbs leg's READ completes as one) is otherwise
// written in one go under the device's send lock, by the loop or the
// goroutine that completed it, and every other QP of the device waits
// for it, their ACKs and requests with them. BenchmarkReadNeighbour
// measures what it costs the stream and gains its neighbours.
const ResponseBudget = maxBurst

// sendLocked writes the packets qp has queued, and the READ responses it
// still owes, in bursts, under d.txMu (d serves qp: QP.send), up to
// ResponseBudget of the responses where d can send the rest later; after
// Close it writes nothing, and what qp queued is dropped, its READ data's
// leases released (nothing will send them).
func (d *Device) sendLocked(qp *QP) {
	responses := 0
	for {
		select {
		case <-d.closed:
			qp.dropTx()
			return
		default:
		}
		msgs := qp.takeTx()
		if len(msgs) == 0 {
			if d.budget > 0 && responses >= d.budget && d.defers() && qp.responsesReady() {
				d.stats.ReadYields.Add(1)
				d.AfterReceived(qp.send)
				return
			}
			n := qp.moreResponsesN()
			if n == 0 {
				return
			}
			responses += n
			continue
		}
		d.writeAll(msgs, qp.qpn)
		qp.releaseTx()
	}
}

// writeAll writes msgs in as few batches as the conn takes, under txMu;
// on an error it logs (naming qpn's QP) and drops the rest: a lost
// transmission is recovered by the retransmission timer.
func (d *Device) writeAll(msgs []roce.Message, qpn uint32) {
	for len(msgs) > 0 {
		n, err := d.conn.WriteBatch(msgs)
		d.stats.TxPackets.Add(uint64(n))
		if err != nil {
			if !errors.Is(err, roce.ErrConnClosed) {
				d.log.Warn("write packets", "qp", qpn, "err", err)
			}
			return
		}
		msgs = msgs[n:]
	}
}

func (d *Device) register(qp *QP) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.closed:
		return fmt.Errorf("transport: create QP: device closed")
	default:
	}
	for range 1 << 24 {
		qpn := d.nextQPN
		d.nextQPN = (d.nextQPN + 1) & roce.PSNMask
		if d.nextQPN < 0x11 {
			d.nextQPN = 0x11
		}
		if d.opts.Queues > 1 && roce.QueueOf(qpn, d.opts.Queues) != d.opts.Queue {
			continue // another queue's number
		}
		if _, used := d.qps[qpn]; !used {
			qp.qpn = qpn
			d.qps[qpn] = qp
			return nil
		}
	}
	return fmt.Errorf("transport: create QP: all QP numbers in use")
}

func (d *Device) unregister(qp *QP) {
	d.mu.Lock()
	if d.qps[qp.qpn] == qp {
		delete(d.qps, qp.qpn)
	}
	d.detachAllLocked(qp)
	d.mu.Unlock()
}
