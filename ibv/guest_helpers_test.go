package ibv_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// guestTimeout bounds every wait in the guest (TCG makes rxe ~100x slower
// than hardware).
const guestTimeout = 30 * time.Second

var nextPort atomic.Uint32

func init() { nextPort.Store(7470) }

// peer is one end of an RC connection made through rdma_cm: its channel, id,
// PD, CQ, QP and a registered arena.
type peer struct {
	ch    *ibv.EventChannel
	id    *ibv.CMID
	pd    *ibv.PD
	cq    *ibv.CQ
	qp    *ibv.QP
	arena *ibv.Arena
	mr    *ibv.MR

	cqEntries int  // setup's CQ size (0: 256)
	sharedPD  bool // pd is another peer's: setup and close leave it alone
}

const bufSize = 1 << 16

// remote is what a peer tells the other about its memory (16 bytes of
// private data: address, rkey, length).
type remote struct {
	Addr uint64
	RKey uint32
	Len  uint32
}

func (r remote) bytes() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, r.Addr)
	binary.BigEndian.PutUint32(b[8:], r.RKey)
	binary.BigEndian.PutUint32(b[12:], r.Len)
	return b
}

func parseRemote(t testing.TB, b []byte) remote {
	t.Helper()
	if len(b) < 16 {
		t.Fatalf("private data %d bytes, want at least 16", len(b))
	}
	return remote{binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])}
}

func (p *peer) remote() remote { return remote{p.mr.Addr(), p.mr.RKey(), bufSize} }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guestTimeout)
	t.Cleanup(cancel)
	return ctx
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setup makes the PD, CQ, QP (on the id) and a registered arena.
func (p *peer) setup(t testing.TB, id *ibv.CMID, busyPoll ...bool) {
	t.Helper()
	var err error
	p.id = id
	dev, err := id.Device()
	check(t, err)
	if !p.sharedPD {
		p.pd, err = dev.AllocPD()
		check(t, err)
		t.Cleanup(func() { p.pd.Close() })
	}
	entries := p.cqEntries
	if entries == 0 {
		entries = 256
	}
	p.cq, err = dev.NewCQ(ibv.CQOptions{Entries: entries, BusyPoll: len(busyPoll) > 0 && busyPoll[0]})
	check(t, err)
	t.Cleanup(func() { p.cq.Close() })
	p.qp, err = id.CreateQP(p.pd, ibv.QPOptions{
		Type: ibv.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: ibv.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2},
	})
	check(t, err)
	p.arena, err = ibv.MapArena(bufSize, ibv.ArenaOptions{})
	check(t, err)
	t.Cleanup(func() { p.arena.Close() })
	p.mr, err = p.pd.RegMR(p.arena.Bytes(), ibv.AccessAll)
	check(t, err)
}

// close closes everything the peer made, in an order that exercises the
// cascade (the channel first: it takes the id and the QP with it).
func (p *peer) close(t testing.TB) {
	t.Helper()
	pd := p.pd
	if p.sharedPD {
		pd = nil
	}
	for _, c := range []interface{ Close() error }{p.ch, p.mr, p.arena, p.cq, pd} {
		if c != nil {
			if err := c.Close(); err != nil {
				t.Errorf("close %T: %v", c, err)
			}
		}
	}
}

// connectOptions shape connectRC.
type connectOptions struct {
	clientData, serverData []byte  // private data; nil: each side's remote()
	reject                 []byte  // reject with this private data instead of accepting
	busyPoll               bool    // CQs busy-poll instead of sleeping on a channel
	clientCQEntries        int     // the client's CQ size (0: 256)
	serverPD               *ibv.PD // the server's QP and MR go in this PD (nil: a new one)
}

// connectRC connects a client on d.Name (d.IP) to a server listening on
// d.Peer (d.PeerIP) through rdma_cm, exchanging their memory in private
// data. It returns the client, the server, and the private data each got.
func connectRC(t testing.TB, d guest.Dev, o connectOptions) (cli, srv *peer, cliGot, srvGot []byte) {
	t.Helper()
	var err error
	ctx := ctxT(t)
	port := uint16(nextPort.Add(1))
	srv, cli = &peer{}, &peer{}

	srv.ch, err = ibv.NewEventChannel()
	check(t, err)
	t.Cleanup(func() { srv.close(t) })
	lid, err := srv.ch.NewID(ibv.PortSpaceTCP)
	check(t, err)
	check(t, lid.Bind(netip.AddrPortFrom(d.PeerIP, port)))
	check(t, lid.Listen(8))

	cli.ch, err = ibv.NewEventChannel()
	check(t, err)
	t.Cleanup(func() { cli.close(t) })
	cid, err := cli.ch.NewID(ibv.PortSpaceTCP)
	check(t, err)
	check(t, cid.ResolveAddr(d.IP, netip.AddrPortFrom(d.PeerIP, port), 0))
	_, err = cli.ch.Expect(ctx, ibv.CMAddrResolved)
	check(t, err)
	check(t, cid.ResolveRoute(0))
	_, err = cli.ch.Expect(ctx, ibv.CMRouteResolved)
	check(t, err)
	cli.cqEntries = o.clientCQEntries
	cli.setup(t, cid, o.busyPoll)
	post(t, cli.qp, recvWRs(cli.mr, 0, 8)...)
	cd := o.clientData
	if cd == nil {
		cd = cli.remote().bytes()
	}
	check(t, cid.Connect(ibv.ConnParam{PrivateData: cd, ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}))

	req, err := srv.ch.Expect(ctx, ibv.CMConnectRequest)
	check(t, err)
	if req.ListenID != lid {
		t.Fatalf("connect request for listener %p, want %p", req.ListenID, lid)
	}
	srvGot = req.Param.PrivateData
	if o.reject != nil {
		check(t, req.ID.Reject(o.reject))
		ev, err := cli.ch.Next(ctx)
		check(t, err)
		if ev.Type != ibv.CMRejected {
			t.Fatalf("client got %v (status %d), want %v", ev.Type, ev.Status, ibv.CMRejected)
		}
		check(t, req.ID.Close())
		return cli, srv, ev.Param.PrivateData, srvGot
	}
	srv.pd, srv.sharedPD = o.serverPD, o.serverPD != nil
	srv.setup(t, req.ID)
	post(t, srv.qp, recvWRs(srv.mr, 0, 8)...)
	sd := o.serverData
	if sd == nil {
		sd = srv.remote().bytes()
	}
	check(t, req.ID.Accept(ibv.ConnParam{PrivateData: sd, ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7}))
	est, err := cli.ch.Expect(ctx, ibv.CMEstablished)
	check(t, err)
	_, err = srv.ch.Expect(ctx, ibv.CMEstablished)
	check(t, err)
	return cli, srv, est.Param.PrivateData, srvGot
}

// post posts receive WRs.
func post(t testing.TB, qp *ibv.QP, wrs ...ibv.RecvWR) {
	t.Helper()
	if n, err := qp.PostRecv(wrs); err != nil || n != len(wrs) {
		t.Fatalf("post recv: %d of %d: %v", n, len(wrs), err)
	}
}

// recvWRs makes n receive WRs over 1 KiB slots of mr starting at slot first
// (IDs 1000+slot).
func recvWRs(mr *ibv.MR, first, n int) []ibv.RecvWR {
	wrs := make([]ibv.RecvWR, n)
	for i := range wrs {
		s := first + i
		wrs[i] = ibv.RecvWR{ID: uint64(1000 + s), SGEs: []ibv.SGE{mustSGE(mr, s*1024, 1024)}}
	}
	return wrs
}

func send(t testing.TB, qp *ibv.QP, wrs ...ibv.SendWR) {
	t.Helper()
	if n, err := qp.PostSend(wrs); err != nil || n != len(wrs) {
		t.Fatalf("post send: %d of %d: %v", n, len(wrs), err)
	}
}

// wait collects n completions from cq (failing on timeout).
func wait(t testing.TB, cq *ibv.CQ, n int) []ibv.WorkCompletion {
	t.Helper()
	ctx := ctxT(t)
	var out []ibv.WorkCompletion
	buf := make([]ibv.WorkCompletion, 16)
	for len(out) < n {
		k, err := cq.Wait(ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("wait for %d completions, got %d (%v): %v", n, len(out), out, err)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// waitOK is wait, failing on any completion error.
func waitOK(t testing.TB, cq *ibv.CQ, n int) []ibv.WorkCompletion {
	t.Helper()
	wcs := wait(t, cq, n)
	for _, wc := range wcs {
		if err := wc.Err(); err != nil {
			t.Fatalf("%v (opcode %v)", err, wc.Opcode)
		}
	}
	return wcs
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func errIs(err, target error) bool { return errors.Is(err, target) }

func describe(wcs []ibv.WorkCompletion) string {
	s := ""
	for _, wc := range wcs {
		s += fmt.Sprintf("[id %d %v %v len %d] ", wc.ID, wc.Opcode, wc.Status, wc.ByteLen)
	}
	return s
}
