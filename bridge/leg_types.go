package bridge

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
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
type connParams struct {
	privateData        []byte
	respRes, initDepth int
	// client is who connects, for a leg that carries it on (quic).
	client netip.AddrPort
}

// rejected is a refusal to pass back to a client: the far side's reason
// and private data, or a timeout.
type rejected struct {
	reason      cm.RejectReason
	privateData []byte
}

func (r *rejected) Error() string { return fmt.Sprintf("rejected: %v", r.reason) }

// A leg is one fabric the gateway sits on, as routes use it.
type leg interface {
	listen(addr netip.AddrPort) (listener, error)
	// dial connects to a target; a refusal is a *rejected.
	dial(ctx context.Context, to netip.AddrPort, p connParams) (conn, error)
	close() error

	// status fills what the leg knows of itself now, beyond its
	// configuration: the MTU it carries, the GID it chose, its unanswered
	// neighbours, its peer gateways.
	status(st *LegStatus)
	// link reads the leg's link (sysRoot: where sysfs is): its state,
	// whether it is up, and a verbs port as read (nil for other legs, or
	// when unreadable).
	link(sysRoot string) (state string, up bool, port *portcounters.Port)
	// counters fills the leg's counters for a scrape.
	counters(c *legCounters)
	// objects counts what the leg holds open: userspace QPs (QP 1 among
	// them) and CM connections.
	objects() (qps, cmConns int)
	// health says why the leg cannot work now (a receive loop that has
	// not come round for stall), nil when it can.
	health(now time.Time, stall time.Duration) error
	// nicPort names the verbs port whose counters /metrics shows; ok is
	// false for other legs.
	nicPort() (device string, port int, ok bool)
}

// A groupLeg is a leg that carries multicast groups (userspace and verbs
// legs).
type groupLeg interface {
	leg
	// groupPort joins group on the leg, as side (0 RoCE, 1 IB) of gc; the
	// port receives unless sendOnly. own is the gateway's address there,
	// qkey the group's Q_Key (a verbs leg learns it from the join; rdma_cm's
	// for UDP port space otherwise).
	groupPort(ctx context.Context, gc *config.Group, side int, sendOnly bool, timeout time.Duration, s spin) (p udPort, own netip.Addr, qkey uint32, err error)
	// joinedLink finds the Ethernet link of the members of a joined
	// group: its interface, network namespace and the gateway's address.
	joinedLink() (ifname, ns string, addr netip.Addr, err error)
}

type listener interface {
	next(ctx context.Context) (incoming, error)
	close() error
}

// incoming is a client's connection request, held until answered.
type incoming interface {
	remote() netip.AddrPort
	params() connParams
	accept(ctx context.Context, p connParams) (conn, error)
	reject(r *rejected) error
}

// conn is an established connection on a leg.
type conn interface {
	endpoint() session.Endpoint
	params() connParams // the peer's: a dial's REP
	describe() string   // QPNs and MTU, for the logs
	close() error       // disconnects and frees what endpoint does not
}

// udRecvDepth is the receives each gateway UD QP keeps posted.
const udRecvDepth = 32

// A udLeg is a leg that carries UD routes.
type udLeg interface {
	listenUD(addr netip.AddrPort) (udListener, error)
	// dialUD makes the target-side QP and resolves the service at to
	// with it; a refusal is a *udRefused.
	dialUD(ctx context.Context, to netip.AddrPort, privateData []byte) (udPort, udService, error)
}

type udListener interface {
	next(ctx context.Context) (udIncoming, error)
	close() error
}

// udIncoming is a client's SIDR_REQ, held until answered.
type udIncoming interface {
	remote() netip.AddrPort
	privateData() []byte
	// accept makes the client-side QP and answers with it.
	accept(privateData []byte) (udPort, error)
	reject(status cm.SIDRStatus, privateData []byte) error
	// drop forgets the request unanswered.
	drop()
}

// udService is what a SIDR_REP named.
type udService struct {
	addr        netip.Addr
	qpn, qkey   uint32
	privateData []byte
}

// udRefused is a target's SIDR_REP with a status other than success.
type udRefused struct {
	status      cm.SIDRStatus
	privateData []byte
}

func (r *udRefused) Error() string { return fmt.Sprintf("SIDR_REP status %v", r.status) }

// udDatagram is a datagram a udPort received: its payload is
// buf.B()[off:off+n], and buf is the relay's to release.
type udDatagram struct {
	buf         *pool.Buf
	off, n      int
	src         netip.Addr
	srcQPN      uint32
	imm         uint32
	hasImm      bool
	poolEmpty   bool // no buffer to repost: the datagram is dropped, buf is nil
	tooLongHere bool // longer than the receive (cannot happen within the leg's MTU)
}

func (d *udDatagram) payload() []byte { return d.buf.B()[d.off : d.off+d.n] }

// udDest is where a udPort sends.
type udDest struct {
	addr      netip.Addr
	qpn, qkey uint32
}

// udPort is one of the gateway's UD QPs, with its receive queue kept full
// of pool buffers. recv is called by one goroutine, send by one other.
type udPort interface {
	qpn() uint32
	mtu() int // the largest datagram the leg carries
	recv(ctx context.Context) (*udDatagram, error)
	// send sends d's payload to dst; d's buffer may be released when it
	// returns.
	send(ctx context.Context, d *udDatagram, dst udDest, imm uint32, hasImm bool) error
	// noReceive counts what arrived with no receive posted, where the
	// leg can tell (0 where the HCA drops them unseen).
	noReceive() uint64
	describe() string
	close() error
}

// udRing keeps a port's receive queue full of pool buffers: posted by
// work request ID (the buffer's arena offset).
type udRing struct {
	pool *pool.Pool
	size int
	post func(b *pool.Buf) error

	mu     sync.Mutex // guards posted
	posted map[uint64]*pool.Buf
}

func newUDRing(pl *pool.Pool, size int, post func(b *pool.Buf) error) (*udRing, error) {
	r := &udRing{pool: pl, size: size, post: post, posted: map[uint64]*pool.Buf{}}
	for range udRecvDepth {
		b, err := pl.Get(size)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("receive buffers: %w", err)
		}
		if err := r.postBuf(b); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *udRing) postBuf(b *pool.Buf) error {
	r.mu.Lock()
	r.posted[uint64(b.Offset())] = b
	r.mu.Unlock()
	if err := r.post(b); err != nil {
		r.mu.Lock()
		delete(r.posted, uint64(b.Offset()))
		r.mu.Unlock()
		b.Release()
		return fmt.Errorf("post a receive: %w", err)
	}
	return nil
}

// take returns the buffer of a completed receive, having posted a fresh
// one in its place; when the pool has none it reposts the same buffer
// and returns nil (the datagram is dropped: the queue stays full).
func (r *udRing) take(id uint64) (*pool.Buf, bool, error) {
	r.mu.Lock()
	b := r.posted[id]
	delete(r.posted, id)
	r.mu.Unlock()
	if b == nil {
		return nil, false, fmt.Errorf("receive completion %#x for no posted buffer", id)
	}
	fresh, err := r.pool.Get(r.size)
	if err != nil {
		return nil, true, r.postBuf(b)
	}
	if err := r.postBuf(fresh); err != nil {
		b.Release()
		return nil, false, err
	}
	return b, false, nil
}

// close releases the posted buffers (the QP is gone or in error: nothing
// lands in them any more).
func (r *udRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, b := range r.posted {
		b.Release()
		delete(r.posted, id)
	}
}

// spin is how one receive loop waits: sleeping (on false), or polling,
// pinned to cpu (-1: wherever the kernel runs its thread).
type spin struct {
	on  bool
	cpu int
}

// String describes the spin for a port's description.
func (s spin) String() string {
	switch {
	case !s.on:
		return ""
	case s.cpu < 0:
		return ", busy-polled"
	}
	return fmt.Sprintf(", busy-polled on CPU %d", s.cpu)
}

// pin locks the calling goroutine, a receive loop, to its OS thread, and
// that thread to the spin's CPU when it has one. The goroutine must not
// unlock it.
func (s spin) pin() error {
	if !s.on {
		return nil
	}
	runtime.LockOSThread()
	if s.cpu < 0 {
		return nil
	}
	return pinThread(s.cpu)
}

// spinWait polls with poll until it returns a completion or an error, or
// ctx ends, without yielding.
func spinWait(ctx context.Context, poll func() (int, error)) (int, error) {
	done := ctx.Done()
	for {
		if n, err := poll(); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-done:
			return 0, ctx.Err()
		default:
		}
	}
}

// LegStatus describes one leg.
type LegStatus struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	IP   string `json:"ip"`
	// State is the link's: a verbs leg's port state (ACTIVE, DOWN, INIT,
	// ... as sysfs names it), a userspace leg's interface's operational
	// state (up, down, lowerlayerdown, unknown, ...), a quic leg's
	// tunnels ("connected (N)", "no peer connection"); "unreadable: why"
	// when it cannot be read. Up says it carries traffic (ACTIVE; up, or
	// unknown as loopback's is, which the kernel counts as up).
	State string `json:"state"`
	Up    bool   `json:"up"`
	// Userspace legs: the interface, its network namespace, the packet
	// I/O, and the largest path MTU the leg carries and why.
	Interface string `json:"interface,omitempty"`
	Netns     string `json:"netns,omitempty"`
	IO        string `json:"io,omitempty"`
	MTU       int    `json:"mtu,omitempty"`
	MTUWhy    string `json:"mtu_why,omitempty"`
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
}

// quicLegSnapshot is a quic leg's counters at one moment.
type quicLegSnapshot struct {
	QUICStatsSnapshot
	Refused uint64
	Conns   int
}

// legCounters are a leg's own counters at a scrape: each leg fills its
// kind's (leg.counters).
type legCounters struct {
	mtu       int // userspace legs
	limited   int // userspace legs: QPs DCQCN holds below line rate
	verbs     *VerbsStatsSnapshot
	quic      *quicLegSnapshot
	transport *transport.StatsSnapshot
	cm        *cm.StatsSnapshot
	udp       *udpconn.StatsSnapshot
	xdp       *xdp.ConnStats
	neigh     *xdp.ResolverStatsSnapshot
	prog      *xdp.Counters
}
