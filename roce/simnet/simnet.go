// Package simnet is an in-memory network for RoCEv2 transport tests: conns
// that implement roce.PacketConn and a link with configurable loss,
// duplication, reordering, delay and ECN marking, driven by a seeded random
// source so that a failing run can be repeated.
package simnet

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// Options describes the link's impairments. Probabilities are in [0, 1].
type Options struct {
	Loss      float64       // drop a packet
	Duplicate float64       // deliver a packet twice
	Reorder   float64       // hold a packet back and deliver it after the next one
	MarkECN   float64       // set ECN-CE on an ECN-capable packet
	Delay     time.Duration // one-way delay added to every packet (0: immediate)
	Jitter    time.Duration // uniform extra delay in [0, Jitter)
	Seed      uint64        // seed of the random source
	// QueueLen bounds each conn's receive queue; packets beyond it are
	// dropped like a full switch buffer would (default 4096).
	QueueLen int
	// Filter, when set, sees every packet before the impairments and may
	// drop it (return false): tests use it for deterministic faults. pkt
	// is the network's only during the call: a filter that keeps it keeps
	// a copy.
	Filter func(from, to netip.AddrPort, pkt []byte) bool
}

// Net is a simulated network joining conns by address.
type Net struct {
	opts Options

	mu    sync.Mutex // guards the fields below
	rng   *rand.Rand
	conns map[netip.AddrPort]*Conn
	held  packet // the packet held back for reordering, if hasHeld
	// hasHeld says held is a packet.
	hasHeld bool

	dmu        sync.Mutex // guards the delayed packets below
	due        dueHeap
	dseq       uint64
	delivering bool          // routineDeliver is running
	wake       chan struct{} // an earlier packet was queued

	stats Stats
}

// Stats counts what the network did to packets.
type Stats struct {
	Sent, Delivered, Lost, Duplicated, Reordered, Marked, Overflow, NoRoute atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	Sent, Delivered, Lost, Duplicated, Reordered, Marked, Overflow, NoRoute uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{Sent: s.Sent.Load(), Delivered: s.Delivered.Load(), Lost: s.Lost.Load(), Duplicated: s.Duplicated.Load(),
		Reordered: s.Reordered.Load(), Marked: s.Marked.Load(), Overflow: s.Overflow.Load(), NoRoute: s.NoRoute.Load()}
}

type packet struct {
	from, to netip.AddrPort
	buf      *[]byte // the packet's bytes, the network's until released
	ecn      uint8
}

// bufs recycles packets' bytes: a packet's buffer goes back once a reader
// copied it out or the network dropped it, so that the simulated network
// allocates nothing per packet and a benchmark over it measures the
// transport, not the garbage collector.
var bufs = sync.Pool{New: func() any { return new([]byte) }}

// newPacket is a packet of n bytes in a recycled buffer, for the caller
// to fill.
func newPacket(from, to netip.AddrPort, n int, ecn uint8) packet {
	b := bufs.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	return packet{from: from, to: to, buf: b, ecn: ecn}
}

func (p packet) data() []byte { return *p.buf }

// release gives the packet's buffer back; p is not used after.
func (p packet) release() { bufs.Put(p.buf) }

// New returns a network with the given impairments.
func New(opts Options) *Net {
	if opts.QueueLen == 0 {
		opts.QueueLen = 4096
	}
	return &Net{
		opts:  opts,
		rng:   rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		conns: make(map[netip.AddrPort]*Conn),
		wake:  make(chan struct{}, 1),
	}
}

// Stats returns the network's counters.
func (n *Net) Stats() *Stats { return &n.stats }

// SetOptions replaces the impairments (the queue length stays).
func (n *Net) SetOptions(opts Options) {
	n.mu.Lock()
	defer n.mu.Unlock()
	opts.QueueLen = n.opts.QueueLen
	n.opts = opts
}

// Listen returns a conn at addr.
func (n *Net) Listen(addr netip.AddrPort) (*Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.conns[addr]; ok {
		return nil, fmt.Errorf("simnet: %v is in use", addr)
	}
	c := &Conn{net: n, addr: addr, queue: make(chan packet, n.opts.QueueLen), done: make(chan struct{})}
	n.conns[addr] = c
	return c, nil
}

// send applies the impairments to one packet and schedules its delivery.
func (n *Net) send(p packet) {
	n.stats.Sent.Add(1)
	n.mu.Lock()
	o := n.opts
	if (o.Filter != nil && !o.Filter(p.from, p.to, p.data())) || n.rng.Float64() < o.Loss {
		n.mu.Unlock()
		n.stats.Lost.Add(1)
		p.release()
		return
	}
	if p.ecn != 0 && n.rng.Float64() < o.MarkECN {
		p.ecn = roce.ECNCE
		n.stats.Marked.Add(1)
	}
	var outs [3]packet // p, its duplicate, the packet held before
	out := append(outs[:0], p)
	if n.rng.Float64() < o.Duplicate {
		d := newPacket(p.from, p.to, len(p.data()), p.ecn)
		copy(d.data(), p.data())
		out = append(out, d)
		n.stats.Duplicated.Add(1)
	}
	if n.hasHeld {
		out = append(out, n.held) // the held packet now arrives after p
		n.held, n.hasHeld = packet{}, false
	} else if n.rng.Float64() < o.Reorder {
		n.held, n.hasHeld = out[0], true
		out = out[1:]
		n.stats.Reordered.Add(1)
	}
	var delays [len(outs)]time.Duration
	for i := range out {
		delays[i] = o.Delay
		if o.Jitter > 0 {
			delays[i] += time.Duration(n.rng.Int64N(int64(o.Jitter)))
		}
	}
	n.mu.Unlock()
	now := time.Now()
	for i, q := range out {
		if delays[i] == 0 {
			n.deliver(q)
			continue
		}
		n.schedule(now.Add(delays[i]), q)
	}
}

// delayed is a packet waiting out its delay.
type delayed struct {
	at  time.Time
	seq uint64 // keeps packets due at the same time in the order sent
	p   packet
}

// schedule queues p for delivery at at. One goroutine (routineDeliver)
// delivers queued packets in order of due time, then of sending: a constant
// delay keeps the order packets were sent in; jitter reorders them.
func (n *Net) schedule(at time.Time, p packet) {
	n.dmu.Lock()
	n.dseq++
	heap.Push(&n.due, delayed{at: at, seq: n.dseq, p: p})
	start := !n.delivering
	n.delivering = true
	n.dmu.Unlock()
	if start {
		go n.routineDeliver()
	} else {
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
}

// routineDeliver runs while packets are queued.
func (n *Net) routineDeliver() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		n.dmu.Lock()
		if n.due.Len() == 0 {
			n.delivering = false
			n.dmu.Unlock()
			return
		}
		next := n.due[0]
		if wait := time.Until(next.at); wait > 0 {
			n.dmu.Unlock()
			t.Reset(wait)
			select {
			case <-t.C:
			case <-n.wake:
				if !t.Stop() {
					<-t.C
				}
			}
			continue
		}
		heap.Pop(&n.due)
		n.dmu.Unlock()
		n.deliver(next.p)
	}
}

type dueHeap []delayed

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(delayed)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Flush delivers a packet held back for reordering, if any.
func (n *Net) Flush() {
	n.mu.Lock()
	h, ok := n.held, n.hasHeld
	n.held, n.hasHeld = packet{}, false
	n.mu.Unlock()
	if ok {
		n.deliver(h)
	}
}

func (n *Net) deliver(p packet) {
	n.mu.Lock()
	c := n.conns[p.to]
	n.mu.Unlock()
	if c == nil {
		n.stats.NoRoute.Add(1)
		p.release()
		return
	}
	select {
	case <-c.done:
		p.release()
	case c.queue <- p:
		n.stats.Delivered.Add(1)
	default:
		n.stats.Overflow.Add(1)
		p.release()
	}
}

// Conn is one endpoint of a Net; it implements roce.PacketConn. Packets
// carry no IP header here, so ICRCChecked is never set.
type Conn struct {
	net   *Net
	addr  netip.AddrPort
	queue chan packet
	done  chan struct{}
	once  sync.Once
}

var _ roce.PacketConn = (*Conn)(nil)

// ReadBatch blocks for the first packet, then takes what else is queued.
func (c *Conn) ReadBatch(msgs []roce.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var p packet
	select {
	case p = <-c.queue:
	case <-c.done:
		return 0, roce.ErrConnClosed
	}
	return c.take(msgs, p), nil
}

// TryReadBatch takes what is queued without waiting (0 when nothing is),
// as udpconn's does.
func (c *Conn) TryReadBatch(msgs []roce.Message) (int, error) {
	select {
	case <-c.done:
		return 0, roce.ErrConnClosed
	default:
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	select {
	case p := <-c.queue:
		return c.take(msgs, p), nil
	default:
		return 0, nil
	}
}

// take fills msgs with p and what else is queued.
func (c *Conn) take(msgs []roce.Message, p packet) int {
	n := 0
	for {
		m := &msgs[n]
		m.N = copy(m.Buf[:cap(m.Buf)], p.data())
		m.Buf = m.Buf[:cap(m.Buf)]
		m.Addr, m.ECN, m.ICRCChecked = p.from, p.ecn, false
		p.release()
		n++
		if n == len(msgs) {
			return n
		}
		select {
		case p = <-c.queue:
		default:
			return n
		}
	}
}

// WriteBatch sends copies of the messages.
func (c *Conn) WriteBatch(msgs []roce.Message) (int, error) {
	select {
	case <-c.done:
		return 0, roce.ErrConnClosed
	default:
	}
	for i := range msgs {
		m := &msgs[i]
		from := c.addr
		if m.SrcPort != 0 {
			from = netip.AddrPortFrom(from.Addr(), m.SrcPort) // as a NIC choosing the port would send
		}
		p := newPacket(from, m.Addr, m.Len(), m.ECN)
		if _, err := m.CopyTo(p.data()); err != nil {
			p.release()
			return i, fmt.Errorf("simnet: message %d: %w", i, err)
		}
		c.net.send(p)
	}
	return len(msgs), nil
}

// LocalAddr returns the conn's address.
func (c *Conn) LocalAddr() netip.AddrPort { return c.addr }

// Close unblocks readers and removes the conn from the network.
func (c *Conn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.net.mu.Lock()
		delete(c.net.conns, c.addr)
		c.net.mu.Unlock()
	})
	return nil
}
