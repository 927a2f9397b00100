package leg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/portcounters"

	"github.com/quic-go/quic-go"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/tunnel"
)

// A quicLeg is the gateway's side of a tunnel to another rbridge gateway:
// one QUIC connection with mutual TLS (accepted on Listen, or dialed to
// Peer and kept up), each session a stream on it, both ways. A route whose
// target is on the leg opens a stream and asks the peer for the target's
// address (Open); the peer's route listening on its own quic leg for that
// address connects to the target and answers (Accept or Reject): the
// client is accepted here only once the far target accepted.
//
// Concurrency: routineAccept takes the peer's connections, routineDial
// keeps the dialed one up, routineStreams takes each connection's streams
// (the peer's sessions), one goroutine each until its Open is read. mu
// guards conns and services.
type quicLeg struct {
	name  string
	l     *config.Leg
	creds *tunnel.Credentials
	pool  *pool.Pool
	log   *slog.Logger
	UDP   *net.UDPConn
	tr    *quic.Transport
	ln    *quic.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// refused counts peer certificates refused (another CA, expired,
	// the wrong name), each logged; stats is every session's frames.
	refused atomic.Uint64
	stats   QUICStats

	mu       sync.Mutex // guards the fields below
	conns    []*quic.Conn
	up       chan struct{} // closed and replaced when a connection comes up
	services map[netip.AddrPort]*quicListener
	// why is the last reason the tunnel to the peer went down or could
	// not come up (a dial's error, a refusal), shown in status while no
	// connection is up.
	why string
	// refusedLog rate-limits the log of refused peer certificates: the
	// first, then at most one a minute with how many were not logged.
	refusedLogAt time.Time
	refusedQuiet uint64
}

// quicOpenTimeout bounds reading a stream's Open, and its answer.
const quicOpenTimeout = 10 * time.Second

func OpenQUIC(l *config.Leg, cfg *config.Config, pl *pool.Pool, log *slog.Logger) (Leg, error) {
	creds, err := tunnel.LoadCredentials(l.Cert, l.Key, l.CA, l.PeerName)
	if err != nil {
		return nil, err
	}
	var ifc ipoib.Interface
	if l.Over != "" {
		v, _ := cfg.Leg(l.Over) // Parse checked it is a verbs leg
		if ifc, err = IPoIBOf(l, v, ipoib.NewHost(ipoib.Options{})); err != nil {
			return nil, err
		}
		log.Info("quic leg over IPoIB", "leg", l.Name, "interface", ifc.Name, "mode", ifc.Mode, "mtu", ifc.MTU,
			"device", ifc.Device, "port", ifc.Port)
	}
	if exp := creds.Expires(); !exp.IsZero() && time.Now().After(exp) {
		return nil, fmt.Errorf("certificate %s expired at %v", l.Cert, exp)
	}
	bind := netip.AddrPortFrom(l.IP, 0)
	if l.ListenAddr().IsValid() {
		bind = l.ListenAddr()
	}
	udp, err := listenUDP(bind, ifc.Name)
	if err != nil {
		return nil, fmt.Errorf("quic: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var q *quicLeg
	creds.OnRefused = func(err error) { q.onRefused(err, time.Now()) }
	q = &quicLeg{name: l.Name, l: l, creds: creds, pool: pl, log: log.With("leg", l.Name), UDP: udp, tr: &quic.Transport{Conn: udp},
		ctx: ctx, cancel: cancel, up: make(chan struct{}), services: map[netip.AddrPort]*quicListener{}}
	if l.ListenAddr().IsValid() {
		if q.ln, err = q.tr.Listen(creds.ServerConfig(), tunnel.QUICConfig()); err != nil {
			q.Close()
			return nil, fmt.Errorf("quic: listen on %v: %w", bind, err)
		}
		q.wg.Add(1)
		go q.routineAccept()
	}
	if l.PeerAddr().IsValid() {
		q.wg.Add(1)
		go q.routineDial()
	}
	return q, nil
}

// IPoIBOf finds the IPoIB interface of verbs leg v's port, which must
// hold quic leg l's address.
func IPoIBOf(l, v *config.Leg, h *ipoib.Host) (ipoib.Interface, error) {
	gid, err := FindGID(v)
	if err != nil {
		return ipoib.Interface{}, fmt.Errorf("over %q: %w", v.Name, ExplainNoGID(v, "/sys", err))
	}
	ifc, err := h.InterfaceFor(gid.Device, gid.Port)
	if err != nil {
		return ipoib.Interface{}, fmt.Errorf("over %q: %w", v.Name, err)
	}
	for _, p := range ifc.Addrs {
		if p.Addr().Unmap() == l.IP {
			return ifc, nil
		}
	}
	return ipoib.Interface{}, fmt.Errorf("over %q: ip %v is not an address of %s, the IPoIB interface of %s port %d (it has %v)",
		v.Name, l.IP, ifc.Name, gid.Device, gid.Port, ifc.Addrs)
}

// listenUDP opens the tunnel's socket on bind, tied to the interface
// named (SO_BINDTODEVICE) when one is.
func listenUDP(bind netip.AddrPort, ifname string) (*net.UDPConn, error) {
	if ifname == "" {
		return net.ListenUDP("udp", net.UDPAddrFromAddrPort(bind))
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = bindToDevice(int(fd), ifname) }); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("bind to %s: %w", ifname, serr)
		}
		return nil
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", bind.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

func (q *quicLeg) Close() error {
	q.cancel()
	if q.ln != nil {
		_ = q.ln.Close()
	}
	q.mu.Lock()
	conns := q.conns
	q.conns = nil
	q.mu.Unlock()
	for _, c := range conns {
		_ = c.CloseWithError(0, "gateway closing")
	}
	err := q.tr.Close()
	q.wg.Wait()
	if cerr := q.UDP.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = errors.Join(err, cerr)
	}
	return err
}

// addConn makes c the connection sessions go on and takes its streams.
func (q *quicLeg) addConn(c *quic.Conn, how string) {
	cs := c.ConnectionState().TLS
	peer := ""
	if len(cs.PeerCertificates) > 0 {
		peer = cs.PeerCertificates[0].Subject.String()
	}
	q.log.Info("peer gateway connected", "how", how, "remote", c.RemoteAddr(), "certificate", peer)
	q.mu.Lock()
	q.why = ""
	q.conns = append(q.conns, c)
	close(q.up)
	q.up = make(chan struct{})
	q.mu.Unlock()
	q.wg.Add(1)
	go q.routineStreams(c)
}

// peerConns counts the connections to the peer gateway that are up.
func (q *quicLeg) peerConns() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, c := range q.conns {
		if c.Context().Err() == nil {
			n++
		}
	}
	return n
}

func (q *quicLeg) dropConn(c *quic.Conn, err error) {
	q.mu.Lock()
	for i, x := range q.conns {
		if x == c {
			q.conns = append(q.conns[:i], q.conns[i+1:]...)
			break
		}
	}
	if q.ctx.Err() == nil {
		q.why = "the connection to the peer ended: " + err.Error()
	}
	q.mu.Unlock()
	if q.ctx.Err() == nil {
		q.log.Warn("peer gateway connection ended: its sessions end", "remote", c.RemoteAddr(), "err", err)
	}
}

// routineAccept takes the peer gateway's connections. A peer whose
// certificate the CA did not sign (or that expired, or lacks peer_name)
// fails the handshake, logged and counted by the credentials' OnRefused.
func (q *quicLeg) routineAccept() {
	defer q.wg.Done()
	for {
		c, err := q.ln.Accept(q.ctx)
		if err != nil {
			if q.ctx.Err() == nil {
				q.log.Error("quic leg stopped accepting", "err", err)
			}
			return
		}
		q.addConn(c, "accepted")
	}
}

// routineDial connects to the peer gateway and reconnects when the
// connection ends. Attempts back off exponentially with jitter (dialBackoff)
// whichever side refuses: a dial that fails, and a connection the peer
// closes before it proved itself (a certificate the peer refuses ends the
// connection just after the client's side of the handshake completed),
// each wait the next step, logged once per step; only a connection that
// stayed up dialSettled starts the steps again.
func (q *quicLeg) routineDial() {
	defer q.wg.Done()
	peer := q.l.PeerAddr()
	name := q.l.PeerName
	if name == "" {
		name = peer.Addr().String()
	}
	var b dialBackoff
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(peer.Port())))
	for q.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(q.ctx, 5*time.Second)
		c, err := q.tr.Dial(ctx, net.UDPAddrFromAddrPort(peer), q.creds.ClientConfig(name), tunnel.QUICConfig())
		cancel()
		if err == nil {
			err = q.confirm(c)
		}
		if err != nil {
			if q.ctx.Err() != nil {
				return
			}
			wait := b.next(rng)
			q.setWhy(err.Error())
			q.log.Warn("connecting to the peer gateway failed: retrying", "peer", peer, "in", wait.Round(time.Millisecond), "attempt", b.step, "err", err)
			select {
			case <-q.ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		up := time.Now()
		q.addConn(c, "dialed")
		select {
		case <-q.ctx.Done():
			return
		case <-c.Context().Done():
		}
		if time.Since(up) >= dialSettled {
			b.reset()
			continue // a connection that served: dial again at once
		}
		wait := b.next(rng)
		q.log.Warn("the peer gateway ended the connection at once: retrying", "peer", peer, "in", wait.Round(time.Millisecond), "attempt", b.step)
		select {
		case <-q.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// confirm waits until c proved itself or ended: a client's handshake
// completes before the server checked the client's certificate, and a
// server that refuses it closes the connection a round trip later. c is
// taken as up once three smoothed round trips (at least 50 ms, at most a
// second) passed without that; the error is the close's.
func (q *quicLeg) confirm(c *quic.Conn) error {
	wait := min(max(3*c.ConnectionStats().SmoothedRTT, 50*time.Millisecond), time.Second)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.Context().Done():
		return fmt.Errorf("the peer gateway closed the connection as it came up: %w", context.Cause(c.Context()))
	case <-q.ctx.Done():
		_ = c.CloseWithError(0, "leg closed")
		return q.ctx.Err()
	}
}

// dialSettled is how long a connection to the peer must stay up for the
// next dial to start the backoff again.
const dialSettled = 10 * time.Second

// dialBackoff is the wait before the next dial to the peer gateway:
// 100 ms doubling to 30 s, each with up to a quarter more at random so
// that gateways restarted together do not dial in step.
type dialBackoff struct{ step int }

const (
	dialFirstWait = 100 * time.Millisecond
	dialMaxWait   = 30 * time.Second
)

func (b *dialBackoff) next(rng *rand.Rand) time.Duration {
	d := dialFirstWait << min(b.step, 20)
	d = min(d, dialMaxWait)
	b.step++
	return d + time.Duration(rng.Int64N(int64(d)/4+1))
}

func (b *dialBackoff) reset() { b.step = 0 }

// onRefused counts a peer certificate refused; the log has the first, then
// at most one a minute with how many it did not show.
func (q *quicLeg) onRefused(err error, now time.Time) {
	q.refused.Add(1)
	q.mu.Lock()
	q.why = "the peer's certificate was refused: " + err.Error()
	if !q.refusedLogAt.IsZero() && now.Sub(q.refusedLogAt) < time.Minute {
		q.refusedQuiet++
		q.mu.Unlock()
		return
	}
	quiet := q.refusedQuiet
	q.refusedLogAt, q.refusedQuiet = now, 0
	q.mu.Unlock()
	q.log.Warn("peer gateway refused: its certificate is not trusted", "err", err, "not_logged_since", quiet)
}

func (q *quicLeg) setWhy(why string) {
	q.mu.Lock()
	q.why = why
	q.mu.Unlock()
}

// routineStreams takes the sessions the peer opens on c.
func (q *quicLeg) routineStreams(c *quic.Conn) {
	defer q.wg.Done()
	for {
		str, err := c.AcceptStream(q.ctx)
		if err != nil {
			q.dropConn(c, err)
			return
		}
		q.wg.Add(1)
		go q.routineOpen(str)
	}
}

// routineOpen reads a stream's Open and hands it to the route listening
// for its target, or rejects it.
func (q *quicLeg) routineOpen(str *quic.Stream) {
	defer q.wg.Done()
	_ = str.SetReadDeadline(time.Now().Add(quicOpenTimeout))
	_, body, err := tunnel.ReadMessage(str, tunnel.TypeOpen)
	if err != nil {
		q.log.Warn("a session from the peer gateway without a good Open: refused", "err", err)
		str.CancelRead(0)
		str.CancelWrite(0)
		return
	}
	_ = str.SetReadDeadline(time.Time{})
	o, err := tunnel.ParseOpen(body)
	if err != nil {
		q.log.Warn("a session from the peer gateway without a good Open: refused", "err", err)
		str.CancelRead(0)
		str.CancelWrite(0)
		return
	}
	f := o.Fields()
	f.PrivateData = append([]byte(nil), f.PrivateData...)
	in := &quicIncoming{q: q, str: str, open: f}
	q.mu.Lock()
	ln := q.services[f.Target]
	q.mu.Unlock()
	if ln == nil {
		q.log.Warn("the peer gateway asked for a target no route here listens for: rejected", "target", f.Target, "client", f.Client)
		_ = in.Reject(&Rejected{Reason: cm.RejectInvalidServiceID})
		return
	}
	select {
	case ln.ch <- in:
	case <-ln.done:
		_ = in.Reject(&Rejected{Reason: cm.RejectInvalidServiceID})
	case <-q.ctx.Done():
		_ = in.Reject(&Rejected{Reason: cm.RejectTimeout})
	}
}

func (q *quicLeg) Listen(addr netip.AddrPort) (Listener, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.services[addr] != nil {
		return nil, fmt.Errorf("quic leg %q: a route listens for %v already", q.name, addr)
	}
	ln := &quicListener{q: q, Addr: addr, ch: make(chan *quicIncoming), done: make(chan struct{})}
	q.services[addr] = ln
	return ln, nil
}

// conn returns a connection to the peer gateway, waiting until ctx ends
// for one to come up.
func (q *quicLeg) conn(ctx context.Context) (*quic.Conn, error) {
	for {
		q.mu.Lock()
		for _, c := range q.conns {
			if c.Context().Err() == nil {
				q.mu.Unlock()
				return c, nil
			}
		}
		up := q.up
		q.mu.Unlock()
		select {
		case <-up:
		case <-ctx.Done():
			if q.l.PeerAddr().IsValid() {
				return nil, fmt.Errorf("quic leg %q: no connection to the peer gateway at %v: %w", q.name, q.l.PeerAddr(), ctx.Err())
			}
			return nil, fmt.Errorf("quic leg %q: the peer gateway has not connected (it dials this leg's listen %v): %w", q.name, q.l.ListenAddr(), ctx.Err())
		}
	}
}

func (q *quicLeg) Dial(ctx context.Context, to netip.AddrPort, p Params) (Conn, error) {
	c, err := q.conn(ctx)
	if err != nil {
		return nil, err
	}
	str, err := c.OpenStreamSync(ctx)
	if err != nil {
		return nil, fmt.Errorf("quic leg %q: open a session stream: %w", q.name, err)
	}
	fail := func(err error) (Conn, error) {
		str.CancelRead(0)
		str.CancelWrite(0)
		return nil, err
	}
	open := tunnel.OpenFields{Client: p.Client, Target: to, RespRes: clampU8(p.RespRes), InitDepth: clampU8(p.InitDepth),
		MaxOps: quicWindow, PrivateData: p.PrivateData}
	b, err := open.Append(nil)
	if err != nil {
		return fail(fmt.Errorf("quic leg %q: %w", q.name, err))
	}
	if _, err := str.Write(b); err != nil {
		return fail(fmt.Errorf("quic leg %q: send Open: %w", q.name, err))
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = str.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = str.SetReadDeadline(time.Now()) })
	typ, body, err := tunnel.ReadMessage(str, tunnel.TypeAccept, tunnel.TypeReject)
	stop()
	if err != nil {
		return fail(fmt.Errorf("quic leg %q: the peer gateway's answer for %v: %w", q.name, to, err))
	}
	_ = str.SetReadDeadline(time.Time{})
	if typ == tunnel.TypeReject {
		rj, err := tunnel.ParseReject(body)
		if err != nil {
			return fail(fmt.Errorf("quic leg %q: %w", q.name, err))
		}
		f := rj.Fields()
		_ = str.Close()
		str.CancelRead(0)
		return nil, &Rejected{Reason: cm.RejectReason(f.Reason), PrivateData: append([]byte(nil), f.PrivateData...)}
	}
	a, err := tunnel.ParseAccept(body)
	if err != nil {
		return fail(fmt.Errorf("quic leg %q: %w", q.name, err))
	}
	f := a.Fields()
	desc := fmt.Sprintf("quic leg %s stream %d to %v", q.name, str.StreamID(), c.RemoteAddr())
	ep, err := NewQUICEndpoint(QUICOptions{Stream: str, Window: int(f.MaxOps), Pool: q.pool, Logger: q.log, Name: desc, Stats: &q.stats})
	if err != nil {
		return fail(err)
	}
	return &quicConn{ep: ep, desc: desc,
		p: Params{PrivateData: append([]byte(nil), f.PrivateData...), RespRes: int(f.RespRes), InitDepth: int(f.InitDepth)}}, nil
}

func clampU8(n int) uint8 { return uint8(min(max(n, 0), 255)) }

// quicListener is a route listening on the leg for one target address.
type quicListener struct {
	q    *quicLeg
	Addr netip.AddrPort
	ch   chan *quicIncoming
	done chan struct{}
	once sync.Once
}

func (l *quicListener) Next(ctx context.Context) (Incoming, error) {
	select {
	case in := <-l.ch:
		return in, nil
	case <-l.done:
		return nil, fmt.Errorf("quic leg %q: listener for %v closed", l.q.name, l.Addr)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *quicListener) Close() error {
	l.once.Do(func() {
		l.q.mu.Lock()
		if l.q.services[l.Addr] == l {
			delete(l.q.services, l.Addr)
		}
		l.q.mu.Unlock()
		close(l.done)
	})
	return nil
}

// quicIncoming is a session the peer gateway opened, held until answered.
type quicIncoming struct {
	q    *quicLeg
	str  *quic.Stream
	open tunnel.OpenFields
}

func (in *quicIncoming) Remote() netip.AddrPort { return in.open.Client }

func (in *quicIncoming) Params() Params {
	return Params{PrivateData: in.open.PrivateData, RespRes: int(in.open.RespRes), InitDepth: int(in.open.InitDepth)}
}

func (in *quicIncoming) Accept(ctx context.Context, p Params) (Conn, error) {
	f := tunnel.AcceptFields{RespRes: clampU8(p.RespRes), InitDepth: clampU8(p.InitDepth), MaxOps: quicWindow, PrivateData: p.PrivateData}
	b, err := f.Append(nil)
	if err == nil {
		_, err = in.str.Write(b)
	}
	if err != nil {
		in.str.CancelRead(0)
		in.str.CancelWrite(0)
		return nil, fmt.Errorf("quic leg %q: send Accept: %w", in.q.name, err)
	}
	desc := fmt.Sprintf("quic leg %s stream %d from the peer gateway", in.q.name, in.str.StreamID())
	ep, err := NewQUICEndpoint(QUICOptions{Stream: in.str, Window: int(in.open.MaxOps), Pool: in.q.pool, Logger: in.q.log, Name: desc, Stats: &in.q.stats})
	if err != nil {
		in.str.CancelRead(0)
		in.str.CancelWrite(0)
		return nil, err
	}
	return &quicConn{ep: ep, desc: desc, p: in.Params()}, nil
}

func (in *quicIncoming) Reject(r *Rejected) error {
	pd := r.PrivateData
	pd = clip(pd, tunnel.MaxPrivateData)
	f := tunnel.RejectFields{Reason: uint16(r.Reason), PrivateData: pd}
	b, err := f.Append(nil)
	if err == nil {
		_, err = in.str.Write(b)
	}
	_ = in.str.Close()
	in.str.CancelRead(0)
	if err != nil {
		return fmt.Errorf("quic leg %q: send Reject: %w", in.q.name, err)
	}
	return nil
}

// quicConn is an established session stream.
type quicConn struct {
	ep   *QUICEndpoint
	p    Params
	desc string
}

func (c *quicConn) Endpoint() session.Endpoint { return c.ep }
func (c *quicConn) Params() Params             { return c.p }
func (c *quicConn) Describe() string           { return c.desc }
func (c *quicConn) Close() error               { return c.ep.Close() }

func (q *quicLeg) Status(st *Status) {
	n := q.peerConns()
	st.Listen, st.Peer = q.l.Listen, q.l.Peer
	st.PeerConns, st.PeerRefused = &n, q.refused.Load()
	if n == 0 {
		q.mu.Lock()
		st.PeerWhy = q.why
		q.mu.Unlock()
	}
}

// link is the tunnel to the peer gateway.
func (q *quicLeg) Link(string, bool) (string, bool, *portcounters.Port) {
	if n := q.peerConns(); n > 0 {
		return fmt.Sprintf("connected (%d)", n), true, nil
	}
	return "no peer connection", false, nil
}

func (q *quicLeg) Counters(c *Counters) {
	c.QUIC = &QUICLegSnapshot{QUICStatsSnapshot: q.stats.Snapshot(), Refused: q.refused.Load(), Conns: q.peerConns()}
}

func (q *quicLeg) Objects() (int, int) { return 0, 0 }

func (q *quicLeg) Health(time.Time, time.Duration) error { return nil }

func (q *quicLeg) NICPort() (string, int, bool) { return "", 0, false }
