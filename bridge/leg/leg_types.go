package leg

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/portcounters"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// connParams are what a connection request carries through the gateway.
type Params struct {
	PrivateData        []byte
	RespRes, InitDepth int
	// Receives and ReceiveSize, when above 0, are what the connection's
	// peer may send at once and the largest SEND it sends, as the
	// protocol the route carries says (a storage queue's depth, its
	// responses' size): a verbs leg keeps at least Receives posted, of
	// ReceiveSize bytes when that is smaller than its own receive_size.
	Receives, ReceiveSize int
	// Stages says the route's protocol may expose staging on this
	// connection to its peer, as it does toward a storage protocol's
	// one-sided initiator behind a verbs leg. A verbs leg whose device has
	// no memory windows gives such a connection a protection domain of its
	// own, so the keys it exposes are valid on its QP alone; other legs
	// take no notice.
	Stages bool
	// client is who connects, for a leg that carries it on (quic).
	Client netip.AddrPort
}

// rejected is a refusal to pass back to a client: the far side's reason
// and private data, or a timeout.
type Rejected struct {
	Reason      cm.RejectReason
	PrivateData []byte
}

func (r *Rejected) Error() string { return fmt.Sprintf("rejected: %v", r.Reason) }

// A leg is one fabric the gateway sits on, as routes use it.
// LinkNoter is a leg told what the gateway's link watcher saw of its link
// before the sessions through it end: a connection on a leg whose link is
// down, or whose floating address left (freebind), does not wait for its
// peer's answer to a disconnect (nothing can reach it from here now), and
// that wait would hold up the session's other side.
type LinkNoter interface {
	// NoteLink says whether the leg's peers can be reached through it:
	// its link up, and its floating address (if any) held.
	NoteLink(up bool)
}

// LinkWatcher is a leg that says when its link may have changed, so that
// the gateway's link watch reads it at once rather than at its next poll.
type LinkWatcher interface {
	// WatchLink calls changed whenever the leg's link or addresses may
	// have changed, until ctx ends, or until the watch is lost (lost
	// says why). It fails when the leg cannot be watched.
	WatchLink(ctx context.Context, changed func(), lost func(error)) error
}

type Leg interface {
	Listen(addr netip.AddrPort) (Listener, error)
	// dial connects to a target; a refusal is a *rejected.
	Dial(ctx context.Context, to netip.AddrPort, p Params) (Conn, error)
	Close() error

	// status fills what the leg knows of itself now, beyond its
	// configuration: the MTU it carries, the GID it chose, its unanswered
	// neighbours, its peer gateways.
	Status(st *Status)
	// link reads the leg's link (sysRoot: where sysfs is): its state,
	// whether it is up, and, with withPort, a verbs port as read with its
	// counters (nil for other legs, without withPort, or when unreadable).
	Link(sysRoot string, withPort bool) (state string, up bool, port *portcounters.Port)
	// counters fills the leg's counters for a scrape.
	Counters(c *Counters)
	// objects counts what the leg holds open: userspace QPs (QP 1 among
	// them) and CM connections.
	Objects() (qps, cmConns int)
	// health says why the leg cannot work now (a receive loop that has
	// not come round for stall), nil when it can.
	Health(now time.Time, stall time.Duration) error
	// nicPort names the verbs port whose counters /metrics shows; ok is
	// false for other legs.
	NICPort() (device string, port int, ok bool)
}

// A ReceiveHolder is a leg whose sockets hold pool buffers for their next
// reads (a userspace leg's UDP sockets that lend what they read): from one
// read to the next their count moves with the traffic, so a count of what
// the gateway holds at rest leaves them out.
type ReceiveHolder interface {
	ReceiveFrames() int
}

// A groupLeg is a leg that carries multicast groups (userspace and verbs
// legs).
type GroupLeg interface {
	Leg
	// groupPort joins group on the leg, as side (0 RoCE, 1 IB) of gc; the
	// port receives unless sendOnly. own is the gateway's address there as
	// its datagrams arrive with it (Datagram.Src: on an InfiniBand port the
	// port's GID, which holds no IP), qkey the group's Q_Key (a verbs leg learns it from the join; rdma_cm's
	// for UDP port space otherwise).
	GroupPort(ctx context.Context, gc *config.Group, side int, sendOnly bool, timeout time.Duration, s Spin) (p UDPort, own netip.Addr, qkey uint32, err error)
	// joinedLink finds the Ethernet link of the members of a joined
	// group: its interface, network namespace and the gateway's address.
	JoinedLink() (ifname, ns string, addr netip.Addr, err error)
}

type Listener interface {
	Next(ctx context.Context) (Incoming, error)
	Close() error
}

// incoming is a client's connection request, held until answered.
type Incoming interface {
	Remote() netip.AddrPort
	Params() Params
	Accept(ctx context.Context, p Params) (Conn, error)
	Reject(r *Rejected) error
}

// conn is an established connection on a leg.
type Conn interface {
	Endpoint() session.Endpoint
	Params() Params   // the peer's: a dial's REP
	Describe() string // QPNs and MTU, for the logs
	Close() error     // disconnects and frees what endpoint does not
}

// UDRecvDepth is the receives each gateway UD QP keeps posted.
const UDRecvDepth = 32

// A udLeg is a leg that carries UD routes.
type UDLeg interface {
	ListenUD(addr netip.AddrPort) (UDListener, error)
	// dialUD makes the target-side QP and resolves the service at to
	// with it; a refusal is a *udRefused.
	DialUD(ctx context.Context, to netip.AddrPort, privateData []byte) (UDPort, UDService, error)
}

type UDListener interface {
	Next(ctx context.Context) (UDIncoming, error)
	Close() error
}

// udIncoming is a client's SIDR_REQ, held until answered.
type UDIncoming interface {
	Remote() netip.AddrPort
	PrivateData() []byte
	// accept makes the client-side QP and answers with it.
	Accept(privateData []byte) (UDPort, error)
	Reject(status cm.SIDRStatus, privateData []byte) error
	// drop forgets the request unanswered.
	Drop()
}

// udService is what a SIDR_REP named.
type UDService struct {
	Addr        netip.Addr
	QPN, QKey   uint32
	PrivateData []byte
}

// udRefused is a target's SIDR_REP with a status other than success.
type UDRefused struct {
	Status      cm.SIDRStatus
	PrivateData []byte
}

func (r *UDRefused) Error() string { return fmt.Sprintf("SIDR_REP status %v", r.Status) }

// Datagram is a datagram a UDPort received: its payload is
// Buf.B()[Off:Off+N], and Buf is the relay's, to release or to hand to
// Send.
type Datagram struct {
	Buf         *pool.Buf
	Off, N      int
	Src         netip.Addr
	SrcQPN      uint32
	Imm         uint32 // sent on with the datagram (the relay may rewrite it)
	HasImm      bool
	PoolEmpty   bool // no buffer to repost: the datagram is dropped, Buf is nil
	TooLongHere bool // longer than the receive (cannot happen within the leg's MTU)
}

func (d *Datagram) Payload() []byte { return d.Buf.B()[d.Off : d.Off+d.N] }

// UDDest is where a UDPort sends.
type UDDest struct {
	Addr      netip.Addr
	QPN, QKey uint32
}

// UDPort is one of the gateway's UD QPs, with its receive queue kept full
// of pool buffers and up to UDSendWindow sends outstanding. Recv is called
// by one goroutine; Send and Flush by one other; Close once they
// returned.
type UDPort interface {
	QPN() uint32
	MTU() int // the largest datagram the leg carries
	// Recv fills ds (the caller's, reused: a receive allocates nothing)
	// with the datagrams received, up to len(ds), and returns how many:
	// at least one when wait (it waits for one), none or more without.
	// Each one's Buf is the caller's. The n datagrams are the caller's
	// even with an error (a receive that failed after them).
	Recv(ctx context.Context, ds []Datagram, wait bool) (n int, err error)
	// Send posts ds to dst, each with its immediate data, and takes their
	// buffers: each is released once its send completed or failed. With
	// UDSendWindow sends outstanding it first waits for completions.
	// What the completions reaped came to is added to sent; a datagram
	// that cannot be posted (ctx ended while waiting for room) counts
	// there as failed.
	Send(ctx context.Context, ds []Datagram, dst UDDest, sent *UDSent)
	// Flush waits until every send posted has completed, adding them to
	// sent; when ctx ends first, those still outstanding count as failed
	// (their buffers are released by Close).
	Flush(ctx context.Context, sent *UDSent)
	// noReceive counts what arrived with no receive posted, where the
	// leg can tell (0 where the HCA drops them unseen).
	NoReceive() uint64
	Describe() string
	Close() error
}

// UDRing keeps a port's receive queue full of pool buffers: UDRecvDepth
// slots, each posted with its index as the work request ID.
type UDRing struct {
	pool *pool.Pool
	size int
	post func(id uint64, b *pool.Buf) error

	mu     sync.Mutex // guards posted
	posted [UDRecvDepth]*pool.Buf
}

func NewUDRing(pl *pool.Pool, size int, post func(id uint64, b *pool.Buf) error) (*UDRing, error) {
	r := &UDRing{pool: pl, size: size, post: post}
	for id := range uint64(UDRecvDepth) {
		b, err := pl.Get(size)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("receive buffers: %w", err)
		}
		if err := r.postBuf(id, b); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// postBuf posts b in slot id (released when the post fails).
func (r *UDRing) postBuf(id uint64, b *pool.Buf) error {
	r.mu.Lock()
	r.posted[id] = b
	r.mu.Unlock()
	if err := r.post(id, b); err != nil {
		r.mu.Lock()
		r.posted[id] = nil
		r.mu.Unlock()
		b.Release()
		return fmt.Errorf("post a receive: %w", err)
	}
	return nil
}

// Take returns the buffer of a completed receive, having posted a fresh
// one in its place; when the pool has none it reposts the same buffer
// and returns nil (the datagram is dropped: the queue stays full).
func (r *UDRing) Take(id uint64) (*pool.Buf, bool, error) {
	var b *pool.Buf
	r.mu.Lock()
	if id < UDRecvDepth {
		b, r.posted[id] = r.posted[id], nil
	}
	r.mu.Unlock()
	if b == nil {
		return nil, false, fmt.Errorf("receive completion %#x for no posted buffer", id)
	}
	fresh, err := r.pool.Get(r.size)
	if err != nil {
		return nil, true, r.postBuf(id, b)
	}
	if err := r.postBuf(id, fresh); err != nil {
		b.Release()
		return nil, false, err
	}
	return b, false, nil
}

// Close releases the posted buffers (the QP is gone or in error: nothing
// lands in them any more).
func (r *UDRing) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, b := range r.posted {
		if b != nil {
			b.Release()
			r.posted[id] = nil
		}
	}
}

// spin is how one receive loop waits: sleeping (on false), or polling,
// pinned to cpu (-1: wherever the kernel runs its thread). Idle (a leg's
// or a group's busy_poll_idle) has a polling loop nap after that long
// without work (MinNap doubling to MaxNap between polls); 0 never. Naps,
// when not nil, counts the quiet spells a group's loop (Spin.Wait) napped
// through; a leg's SpinLoop counts its own.
type Spin struct {
	On   bool
	CPU  int
	Idle time.Duration
	Naps *atomic.Uint64
}

// String describes the spin for a port's description.
func (s Spin) String() string {
	if !s.On {
		return ""
	}
	d := ", busy-polled"
	if s.CPU >= 0 {
		d += fmt.Sprintf(" on CPU %d", s.CPU)
	}
	if s.Idle > 0 {
		d += fmt.Sprintf(", napping after %v idle", s.Idle)
	}
	return d
}

// pin locks the calling goroutine, a receive loop, to its OS thread, and
// that thread to the spin's CPU when it has one. The goroutine must not
// unlock it.
func (s Spin) Pin() error {
	if !s.On {
		return nil
	}
	runtime.LockOSThread()
	if s.CPU < 0 {
		return nil
	}
	return PinThread(s.CPU)
}

// Spins is the spin of each of len(loops) receive loops, of which those
// whose loops[i] is true run: off unless busy, else on, pinned to the
// CPUs of cpus (busy_poll_cpus) in the order of the loops that run, the
// rest unpinned. A CPU the process may not run on is refused.
func Spins(busy bool, cpus []int, loops []bool) ([]Spin, error) {
	s := make([]Spin, len(loops))
	for i := range s {
		s[i].CPU = -1
	}
	if !busy {
		return s, nil
	}
	var allowed map[int]bool
	if len(cpus) > 0 {
		var err error
		if allowed, err = AllowedCPUs(); err != nil {
			return s, fmt.Errorf("busy_poll_cpus: %w", err)
		}
	}
	next := 0
	for i, runs := range loops {
		if !runs {
			continue
		}
		s[i].On = true
		if next < len(cpus) {
			c := cpus[next]
			if !allowed[c] {
				return s, fmt.Errorf("busy_poll_cpus: CPU %d is not one this process may run on (%d allowed)", c, len(allowed))
			}
			s[i].CPU = c
			next++
		}
	}
	return s, nil
}

// LegSpin is how a leg's one receive loop waits (its busy_poll).
func LegSpin(l *config.Leg) (Spin, error) {
	s, err := Spins(l.BusyPoll, l.BusyPollCPUs, []bool{true})
	if s[0].On {
		s[0].Idle = l.BusyPollIdle
	}
	return s[0], err
}

// Wait polls with poll until it returns a completion or an error, or ctx
// ends, without yielding; with an Idle, once poll has found nothing for
// that long in this wait it sleeps between polls, MinNap at first and
// twice as long each time up to MaxNap, the thread and its P given back
// (counted in Naps). The caller calls it when the last wait found work,
// so a wait's length is the loop's quiet spell.
func (s Spin) Wait(ctx context.Context, poll func() (int, error)) (int, error) {
	return s.wait(ctx, poll, time.Now, time.Sleep)
}

// wait is Wait on the clock of now and sleep.
func (s Spin) wait(ctx context.Context, poll func() (int, error), now func() time.Time, sleep func(time.Duration)) (int, error) {
	done := ctx.Done()
	var since time.Time // the first poll that found nothing
	var nap time.Duration
	for {
		if n, err := poll(); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-done:
			return 0, ctx.Err()
		default:
		}
		switch {
		case s.Idle <= 0:
		case nap > 0:
			nap = min(2*nap, MaxNap)
			sleep(nap)
		case since.IsZero():
			since = now()
		case now().Sub(since) >= s.Idle:
			nap = MinNap
			if s.Naps != nil {
				s.Naps.Add(1)
			}
			sleep(nap)
		}
	}
}

// LegStatus describes one leg.
type Status struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	IP   string `json:"ip"`
	// State is the link's: a verbs leg's port state (ACTIVE, DOWN, INIT,
	// ... as sysfs names it), a userspace leg's interface's operational
	// state (up, down, lowerlayerdown, unknown, ...; "absent: why", down,
	// once the interface is no longer in the leg's namespace; "replaced:
	// why", down, an io: afxdp leg's interface made again), a quic leg's
	// tunnels ("connected (N)", "no peer connection"); "unreadable: why"
	// when it cannot be read. Up says it carries traffic (ACTIVE; up, or
	// unknown as loopback's is, which the kernel counts as up).
	State string `json:"state"`
	Up    bool   `json:"up"`
	// LinkWatch is how the gateway learns the link changed: "updates"
	// (a userspace leg's netlink updates, a verbs leg's port events; a
	// read every 2 s besides), or "timer: why" (read every half second,
	// its updates could not be had or ended). Empty for a quic leg.
	LinkWatch string `json:"link_watch,omitempty"`
	// Userspace legs: the interface, its network namespace, the packet
	// I/O, and the largest path MTU the leg carries and why.
	Interface string `json:"interface,omitempty"`
	Netns     string `json:"netns,omitempty"`
	// NetnsMoved says the leg's netns name no longer names the namespace
	// the leg opened in (deleted, or made again): the leg stays there, its
	// link read there, until the gateway restarts. Empty otherwise.
	NetnsMoved string `json:"netns_moved,omitempty"`
	IO         string `json:"io,omitempty"`
	MTU        int    `json:"mtu,omitempty"`
	MTUWhy     string `json:"mtu_why,omitempty"`
	// FreeBind says the leg's ip is a floating address (freebind: true),
	// and IPHeld whether its interface holds it now: false on a warm
	// standby, which is ready all the same and takes traffic the moment
	// the address arrives. IPHeld is nil for other legs (and when the
	// addresses cannot be read).
	FreeBind bool  `json:"freebind,omitempty"`
	IPHeld   *bool `json:"ip_held,omitempty"`
	// UDPOffload is a leg with io: udp's use of the kernel's UDP batching
	// (roce/udpconn.Offload): "gso on, gro on", or why one is off.
	UDPOffload string `json:"udp_offload,omitempty"`
	// AFXDPWakeup is a leg with io: afxdp's wakeup of the kernel
	// (xdp.Wakeup): "need_wakeup on, tx budget 512", or why not.
	AFXDPWakeup string `json:"afxdp_wakeup,omitempty"`
	// AF_XDP legs: the neighbours (next hops) that did not answer the
	// kernel's resolution and are refused for now, and how many
	// resolutions failed since the leg opened.
	NeighborsUnanswered []string `json:"neighbors_unanswered,omitempty"`
	NeighborFailures    uint64   `json:"neighbor_failures,omitempty"`
	// Verbs legs: the device, port and GID the leg's address chose, and
	// why (each session's MTU is in its side's description).
	Device   string `json:"device,omitempty"`
	Port     int    `json:"port,omitempty"`
	GIDIndex int    `json:"gid_index,omitempty"`
	GID      string `json:"gid,omitempty"`
	GIDWhy   string `json:"gid_why,omitempty"`
	// Quic legs: where the leg accepts the peer gateway and where it
	// connects to it, and how many connections to it are up.
	Listen    string `json:"listen,omitempty"`
	Peer      string `json:"peer,omitempty"`
	PeerConns *int   `json:"peer_connections,omitempty"`
	// PeerRefused counts the peer certificates the leg refused.
	PeerRefused uint64 `json:"peer_refused,omitempty"`
	// PeerWhy is why a quic leg has no connection to its peer: the last
	// dial's error, or a refusal (empty while one is up).
	PeerWhy string `json:"peer_why,omitempty"`
	// BusyPoll describes a busy-polled leg's loop ("thread 1234 on CPU
	// 2"), BusyPollThread its thread's ID (a task of the process in
	// /proc, what top -H shows spinning).
	// BusyPollNaps is how many quiet spells the loop has napped
	// through (busy_poll_idle; SpinLoop.Naps).
	BusyPoll       string `json:"busy_poll,omitempty"`
	BusyPollThread int    `json:"busy_poll_thread,omitempty"`
	BusyPollNaps   uint64 `json:"busy_poll_naps,omitempty"`
	// Queues are a userspace leg's receive loops, one per socket (io:
	// udp's UDP sockets, io: afxdp's AF_XDP sockets, one per receive
	// queue of the interface), and QueuesWhy how their number was chosen.
	Queues    []QueueCounters `json:"queues,omitempty"`
	QueuesWhy string          `json:"queues_why,omitempty"`
}

// quicLegSnapshot is a quic leg's counters at one moment.
type QUICLegSnapshot struct {
	QUICStatsSnapshot
	Refused uint64
	Conns   int
}

// legCounters are a leg's own counters at a scrape: each leg fills its
// kind's (leg.counters).
type Counters struct {
	MTU       int // userspace legs
	Limited   int // userspace legs: QPs DCQCN holds below line rate
	Verbs     *VerbsStatsSnapshot
	QUIC      *QUICLegSnapshot
	Transport *transport.StatsSnapshot
	CM        *cm.StatsSnapshot
	UDP       *udpconn.StatsSnapshot
	XDP       *xdp.ConnStats
	Neigh     *xdp.ResolverStatsSnapshot
	Prog      *xdp.Counters
	Queues    []QueueCounters // userspace legs with io: udp: each receive loop's
	// Steer is the reuseport program's count (io: udp with queues above 1).
	Steer *udpconn.SteerCounters
}

// clip cuts private data to the n bytes a message carries (an IB CM REP's
// 196, what rdma_cm leaves of a REQ's 92 after its IP CM header, a
// SIDR_REP's 136, a tunnel frame's): the rest of a peer's private data
// cannot cross, as between two HCAs.
func clip(pd []byte, n int) []byte {
	if len(pd) > n {
		return pd[:n]
	}
	return pd
}
