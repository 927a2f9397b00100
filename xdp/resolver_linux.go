//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Resolving a neighbour. An AF_XDP Conn's frames bypass the kernel's IP
// stack, so nothing makes the kernel resolve the peers it sends to; the
// Resolver does, in the network namespace it was made in, with rtnetlink:
//
//   - The route to the peer (RTM_GETROUTE) gives the next hop: the peer
//     itself on the link, its gateway for a routed peer. The route must
//     leave on the Conn's interface; another is an error naming both.
//   - The kernel's neighbour table answers for a complete entry
//     (REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP) at once.
//   - Otherwise (no entry, INCOMPLETE, FAILED) the kernel is asked to
//     resolve it: RTM_NEWNEIGH with NTF_USE, which runs neigh_event_send
//     on the entry, creating it (`ip neigh replace ADDR dev DEV nud none
//     use`). Verified on veth between network namespaces (kernel 6.18):
//     with no entry, or a FAILED one, the kernel sends ARP requests for
//     IPv4 and neighbour solicitations for IPv6, and the entry turns
//     REACHABLE with the peer's address, notified as RTM_NEWNEIGH,
//     within a couple of milliseconds. A zero-byte UDP datagram to the
//     peer's discard port through the kernel's stack resolves it as
//     fast, but sends the peer a packet (and it an ICMP error back) and
//     needs a socket per family in the namespace; it gains only within
//     the first second or two after the link came up, while its IPv6
//     link-local address is tentative: the solicitation NTF_USE causes
//     has no packet to take a source address from, so it waits for
//     duplicate address detection (the next probe, a second later),
//     where the datagram's leaves from the datagram's source at once.
//     So NTF_USE it is.
//   - The answer is waited for on the kernel's neighbour notifications
//     (one subscription, routineEvents), bounded by Timeout: a timer
//     then looks at the table once more, and the resolution fails
//     unless the entry is complete. A FAILED notification (the kernel's
//     own probes ran out) fails it sooner.
//   - A failed next hop is answered with an error at once for Hold, then
//     asked for again.
//
// Each next hop is in one of three states:
//
//	         Lookup, no complete entry:
//	         NTF_USE, timer started
//	  idle ───────────────────────────────▶ resolving
//	   ▲  ▲                                   │   │
//	   │  └───── answered: a complete entry ──┘   │ FAILED notification,
//	   │         notified, or seen by the timer   │ timer, NTF_USE refused
//	   │                                          ▼
//	   └───────────────── Hold passed ────────── failed
//
// Idle keeps nothing: the kernel's table is the cache. A Lookup while
// resolving returns the resolution's channel, closed when it leaves that
// state; while failed, an error wrapping ErrNoNeighbor.
//
// Concurrency: resolving and failed are guarded by mu; the netlink handle
// by nlMu, held for reading while it is used and for writing by Close. A
// resolution is registered (under mu) before the table is read, so that
// its answer, notified at any time after, finds it. Lookup never waits
// for the network; HardwareAddr does, up to Timeout.

// Resolver resolves peers' IP addresses to Ethernet addresses through the
// kernel's neighbour table (ARP, IPv6 neighbour discovery) of the network
// namespace it was made in, asking the kernel to resolve the ones it does
// not know: the Neighbors of an AF_XDP Conn. It is safe for concurrent use.
type Resolver struct {
	ns      netns.NsHandle
	ifindex int
	src     net.IP // nil: routes looked up from any source
	timeout time.Duration
	hold    time.Duration
	log     *slog.Logger
	stats   ResolverStats

	done chan struct{} // closed by Close: routineEvents ends
	wg   sync.WaitGroup
	once sync.Once

	// nlMu is held for reading while nl is used, for writing by Close.
	nlMu sync.RWMutex
	nl   *netlink.Handle // nil once closed

	// Guarded by mu.
	mu        sync.Mutex
	resolving map[netip.Addr]*resolution // by next hop
	failed    map[netip.Addr]time.Time   // next hop: until when it is not asked for
}

var _ Neighbors = (*Resolver)(nil)

// resolution is one next hop's resolving state.
type resolution struct {
	hop   netip.Addr
	done  chan struct{} // closed when it ends
	timer *time.Timer   // guarded by Resolver.mu; nil until armed
}

// outcome is how a resolution ended.
type outcome int

const (
	known      outcome = iota // the table had a complete entry: nothing asked
	answered                  // asked, and the neighbour answered
	unanswered                // asked, and no answer: failed, held
	abandoned                 // not asked (the table unreadable), or Close
)

// nudComplete are the neighbour states whose address can be sent to.
const nudComplete = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// NewResolver makes a resolver for the interface opts names, in the
// calling thread's network namespace (call it where NewConn is called);
// it keeps working in that namespace from any thread. Close releases it.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("xdp: neighbour resolver: this thread's network namespace: %w", err)
	}
	r := &Resolver{
		ns:        ns,
		ifindex:   opts.Ifindex,
		timeout:   opts.Timeout,
		hold:      opts.Hold,
		log:       opts.Logger,
		done:      make(chan struct{}),
		resolving: make(map[netip.Addr]*resolution),
		failed:    make(map[netip.Addr]time.Time),
	}
	if opts.Src.IsValid() {
		r.src = opts.Src.Unmap().AsSlice()
	}
	if r.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE); err != nil {
		ns.Close()
		return nil, fmt.Errorf("xdp: neighbour resolver: rtnetlink socket: %w", err)
	}
	// Subscribed before the first Lookup can ask: no answer goes unheard.
	ch, stop, err := r.subscribe()
	if err != nil {
		r.nl.Close()
		ns.Close()
		return nil, err
	}
	r.wg.Add(1)
	go r.routineEvents(ch, stop)
	return r, nil
}

// Stats returns the resolver's counters.
func (r *Resolver) Stats() *ResolverStats { return &r.stats }

// Unanswered returns the next hops that did not answer and are refused
// now (until their hold ends), in address order: what a status shows.
func (r *Resolver) Unanswered() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var out []netip.Addr
	for a, until := range r.failed {
		if now.Before(until) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Lookup implements Neighbors: the Ethernet address of ip's next hop if
// the kernel's table has a complete entry for it; else, once the kernel
// was asked to resolve it, a channel closed when the resolution ends (ask
// again then); an error wrapping ErrNoNeighbor while the next hop is held
// as failed. It does not wait for the network.
func (r *Resolver) Lookup(ip netip.Addr) (net.HardwareAddr, <-chan struct{}, error) {
	ip = ip.Unmap()
	r.nlMu.RLock()
	defer r.nlMu.RUnlock()
	if r.nl == nil {
		return nil, nil, fmt.Errorf("xdp: resolve %v: resolver closed", ip)
	}
	hop, err := r.nextHop(ip)
	if err != nil {
		return nil, nil, err
	}
	res, fresh, err := r.start(ip, hop)
	switch {
	case err != nil:
		return nil, nil, err
	case !fresh:
		return nil, res.done, nil // resolving already
	}
	mac, ok, err := r.entry(hop)
	switch {
	case err != nil:
		r.finish(res, abandoned)
		return nil, nil, fmt.Errorf("xdp: resolve %s: %w", name(ip, hop), err)
	case ok:
		r.finish(res, known)
		return mac, nil, nil
	}
	r.stats.Asked.Add(1)
	err = r.nl.NeighSet(&netlink.Neigh{LinkIndex: r.ifindex, Family: family(hop), IP: hop.AsSlice(), State: netlink.NUD_NONE, Flags: netlink.NTF_USE})
	if err != nil {
		r.finish(res, unanswered)
		return nil, nil, fmt.Errorf("%w for %s: ask the kernel to resolve it: %w", ErrNoNeighbor, name(ip, hop), err)
	}
	r.arm(res)
	return nil, res.done, nil
}

// HardwareAddr returns the Ethernet address of ip's next hop, waiting for
// the neighbour to answer if it must, up to the resolver's timeout.
func (r *Resolver) HardwareAddr(ip netip.Addr) (net.HardwareAddr, error) {
	for {
		mac, pending, err := r.Lookup(ip)
		if pending == nil {
			return mac, err
		}
		<-pending // within the timeout; then the table or the hold answers
	}
}

// name is how errors name a peer: with its next hop when routed.
func name(ip, hop netip.Addr) string {
	if ip == hop {
		return ip.String()
	}
	return fmt.Sprintf("%v (next hop %v)", ip, hop)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// nextHop returns the address whose Ethernet address frames to ip go to:
// ip on the link, the route's gateway else. Must hold nlMu for reading.
func (r *Resolver) nextHop(ip netip.Addr) (netip.Addr, error) {
	routes, err := r.nl.RouteGetWithOptions(ip.AsSlice(), &netlink.RouteGetOptions{SrcAddr: r.src})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("xdp: resolve %v: route lookup: %w", ip, err)
	}
	if len(routes) == 0 {
		return netip.Addr{}, fmt.Errorf("xdp: resolve %v: route lookup: no route", ip)
	}
	rt := routes[0]
	if rt.LinkIndex != r.ifindex {
		return netip.Addr{}, fmt.Errorf("xdp: resolve %v: its route leaves on %s, not on the conn's interface %s", ip, r.linkName(rt.LinkIndex), r.linkName(r.ifindex))
	}
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && !gw.IsUnspecified() {
		return gw.Unmap(), nil
	}
	return ip, nil
}

// linkName names an interface for errors. Must hold nlMu for reading.
func (r *Resolver) linkName(ifindex int) string {
	if l, err := r.nl.LinkByIndex(ifindex); err == nil {
		return fmt.Sprintf("%s (ifindex %d)", l.Attrs().Name, ifindex)
	}
	return fmt.Sprintf("ifindex %d", ifindex)
}

// entry returns the Ethernet address of hop's complete entry in the
// kernel's table, and whether there is one. Must hold nlMu for reading.
func (r *Resolver) entry(hop netip.Addr) (net.HardwareAddr, bool, error) {
	var ns []netlink.Neigh
	var err error
	for range 3 { // a dump the table changed under is done again
		if ns, err = r.nl.NeighList(r.ifindex, family(hop)); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the neighbour table: %w", err)
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == hop && n.State&nudComplete != 0 && len(n.HardwareAddr) == 6 {
			return n.HardwareAddr, true, nil
		}
	}
	return nil, false, nil
}

// start returns hop's resolution in progress, or registers a new one
// (fresh) for the caller to carry out; an error while hop is held as
// failed.
func (r *Resolver) start(ip, hop netip.Addr) (res *resolution, fresh bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if until, ok := r.failed[hop]; ok {
		if time.Now().Before(until) {
			return nil, false, fmt.Errorf("%w for %s: no answer within %v (asked again after %v)", ErrNoNeighbor, name(ip, hop), r.timeout, r.hold)
		}
		delete(r.failed, hop)
	}
	if res := r.resolving[hop]; res != nil {
		return res, false, nil
	}
	res = &resolution{hop: hop, done: make(chan struct{})}
	r.resolving[hop] = res
	return res, true, nil
}

// arm starts res's timer, unless it ended already (its answer was
// notified before).
func (r *Resolver) arm(res *resolution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resolving[res.hop] == res {
		res.timer = time.AfterFunc(r.timeout, func() { r.expire(res) })
	}
}

// expire ends res at its timeout: answered if the table now has a
// complete entry (a notification lost), else unanswered.
func (r *Resolver) expire(res *resolution) {
	r.nlMu.RLock()
	defer r.nlMu.RUnlock()
	if r.nl == nil {
		return // Close ended it
	}
	if _, ok, err := r.entry(res.hop); err == nil && ok {
		r.finish(res, answered)
		return
	}
	r.finish(res, unanswered)
}

// finish ends res, if it has not ended, with outcome o: counted, a
// failure held, waiters woken.
func (r *Resolver) finish(res *resolution, o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.resolving[res.hop] != res {
		return
	}
	delete(r.resolving, res.hop)
	if res.timer != nil {
		res.timer.Stop()
	}
	switch o {
	case answered:
		r.stats.Answered.Add(1)
	case unanswered:
		r.stats.Failed.Add(1)
		now := time.Now()
		for hop, until := range r.failed {
			if now.After(until) {
				delete(r.failed, hop)
			}
		}
		r.failed[res.hop] = now.Add(r.hold)
		r.log.Info("xdp: neighbour did not answer", "ifindex", r.ifindex, "neighbour", res.hop, "timeout", r.timeout, "hold", r.hold)
	}
	close(res.done)
}

// subscribe subscribes to the namespace's neighbour notifications; close
// stop to end the subscription (the channel is closed after).
func (r *Resolver) subscribe() (<-chan netlink.NeighUpdate, chan struct{}, error) {
	ch, stop := make(chan netlink.NeighUpdate, 64), make(chan struct{})
	err := netlink.NeighSubscribeWithOptions(ch, stop, netlink.NeighSubscribeOptions{
		Namespace: &r.ns,
		ErrorCallback: func(err error) {
			select {
			case <-stop: // the socket closed under the receive: ours
			default:
				r.log.Warn("xdp: neighbour notifications", "ifindex", r.ifindex, "err", err)
			}
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("xdp: neighbour resolver: subscribe to neighbour notifications: %w", err)
	}
	return ch, stop, nil
}

// routineEvents ends resolutions on the kernel's notifications. A
// subscription whose socket failed (its buffer overran: notifications
// lost) is made again, and the table read for what they may have
// answered.
func (r *Resolver) routineEvents(ch <-chan netlink.NeighUpdate, stop chan struct{}) {
	defer r.wg.Done()
	for {
		select {
		case u, ok := <-ch:
			if ok {
				r.event(u)
				continue
			}
		case <-r.done:
			close(stop)
			for range ch { // until the subscription's goroutine ends
			}
			return
		}
		// The subscription ended on its own.
		close(stop)
		for {
			var err error
			if ch, stop, err = r.subscribe(); err == nil {
				break
			}
			r.log.Warn("xdp: neighbour notifications lost", "ifindex", r.ifindex, "err", err)
			select {
			case <-r.done:
				return
			case <-time.After(time.Second):
			}
		}
		r.recheck()
	}
}

// event ends the resolution a notification answers or fails.
func (r *Resolver) event(u netlink.NeighUpdate) {
	hop, ok := netip.AddrFromSlice(u.IP)
	if u.Type != unix.RTM_NEWNEIGH || u.LinkIndex != r.ifindex || !ok {
		return
	}
	r.mu.Lock()
	res := r.resolving[hop.Unmap()]
	r.mu.Unlock()
	switch {
	case res == nil:
	case u.State&nudComplete != 0 && len(u.HardwareAddr) == 6:
		r.finish(res, answered)
	case u.State&netlink.NUD_FAILED != 0:
		r.finish(res, unanswered)
	}
}

// recheck ends the resolutions the table now answers.
func (r *Resolver) recheck() {
	r.mu.Lock()
	pending := make([]*resolution, 0, len(r.resolving))
	for _, res := range r.resolving {
		pending = append(pending, res)
	}
	r.mu.Unlock()
	r.nlMu.RLock()
	defer r.nlMu.RUnlock()
	if r.nl == nil {
		return
	}
	for _, res := range pending {
		if _, ok, err := r.entry(res.hop); err == nil && ok {
			r.finish(res, answered)
		}
	}
}

// Close stops the resolver: resolutions in progress end (their waiters
// see the resolver closed when they ask again), and the netlink sockets
// and the namespace's handle are closed. It is idempotent.
func (r *Resolver) Close() error {
	var err error
	r.once.Do(func() {
		close(r.done)
		r.wg.Wait()
		r.nlMu.Lock()
		r.nl.Close()
		r.nl = nil
		r.nlMu.Unlock()
		r.mu.Lock()
		pending := make([]*resolution, 0, len(r.resolving))
		for _, res := range r.resolving {
			pending = append(pending, res)
		}
		r.mu.Unlock()
		for _, res := range pending {
			r.finish(res, abandoned)
		}
		err = r.ns.Close()
	})
	if err != nil {
		return fmt.Errorf("xdp: close neighbour resolver: %w", err)
	}
	return nil
}
