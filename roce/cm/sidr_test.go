package cm_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// udQP makes a UD QP in RTS with Q_Key qkey and receives posted at
// offsets 4096*(1+i) of the node's memory.
func (nd *node) udQP(t *testing.T, qkey uint32) *transport.QP {
	t.Helper()
	qp, err := nd.dev.CreateQP(nd.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: nd.cq, RecvCQ: nd.cq})
	check(t, err)
	t.Cleanup(func() { qp.Close() })
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: qkey}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
		check(t, qp.Modify(a))
	}
	for i := range 4 {
		check(t, qp.PostRecv(transport.RecvWR{ID: uint64(200 + i), Local: transport.SGE{MR: nd.mr, Offset: 4096 * (1 + i), Length: 1024}}))
	}
	return qp
}

// madAttr returns the attribute of the CM MAD a packet carries to QP 1.
func madAttr(pkt []byte) (cm.AttrID, bool) {
	if len(pkt) < roce.BTHLen+roce.DETHLen+cm.MADLen || roce.BTH(pkt).DestQP() != cm.GSIQPN {
		return 0, false
	}
	return cm.MADHeader(pkt[roce.BTHLen+roce.DETHLen:]).AttrID(), true
}

// serveUD answers the next n requests on l with qp, checking what the
// requester sent; it returns a wait function with the first failure.
func serveUD(t *testing.T, l *cm.UDListener, cli *node, qp *transport.QP, n int, wantData, reply []byte) func() error {
	var wg sync.WaitGroup
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range n {
			req, err := l.Next(ctxT(t))
			if err != nil {
				serr = err
				return
			}
			switch {
			case !req.HasIPCM || req.IPCM.Src != cli.ip || req.IPCM.IPVersion != 4 || req.Remote != cli.ip:
				serr = errors.New("server: the request's IP CM header or source differ")
			case !bytes.Equal(req.PrivateData[:len(wantData)], wantData) || len(req.PrivateData) != cm.SIDRREQIPCMPrivateDataLen:
				serr = errors.New("server: the request's private data differ")
			case req.SIDRREQ.PKey != roce.DefaultPKey || req.SIDRREQ.ServiceID != l.ServiceID():
				serr = errors.New("server: the request's P_Key or service ID differ")
			}
			if err := req.Accept(cm.SIDRAcceptOptions{QP: qp, PrivateData: reply}); err != nil {
				serr = err
			}
		}
	}()
	return func() error { wg.Wait(); return serr }
}

// TestSIDRResolveAndDatagrams: a client resolves a UD service in rdma_cm's
// UDP port space, learns the server QP's number and Q_Key and the
// server's private data, and datagrams then flow both ways, the server
// answering the source QP and address of what it received.
func TestSIDRResolveAndDatagrams(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts simnet.Options
	}{
		{"lossless", simnet.Options{}},
		{"loss and duplicates", simnet.Options{Loss: 0.3, Duplicate: 0.3, Seed: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := simnet.New(tc.opts)
			cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
			l, err := srv.cm.ListenUD(7174, 4)
			check(t, err)
			t.Cleanup(func() { l.Close() })
			if l.ServiceID() != 0x0000000001111c06 {
				t.Fatalf("UD listener service ID %#x", l.ServiceID())
			}
			srvQP := srv.udQP(t, cm.RDMAUDPQKey)
			const rounds = 8
			wait := serveUD(t, l, cli, srvQP, rounds, []byte("who serves?"), []byte("I do"))
			for range rounds {
				svc, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7174), cm.ResolveOptions{PrivateData: []byte("who serves?")})
				check(t, err)
				if svc.QPN != srvQP.QPN() || svc.QKey != cm.RDMAUDPQKey || svc.Addr != netip.AddrPortFrom(srv.ip, 7174) ||
					svc.ServiceID != l.ServiceID() || !bytes.HasPrefix(svc.PrivateData, []byte("I do")) || len(svc.PrivateData) != cm.SIDRREPPrivateDataLen {
					t.Fatalf("resolved %+v, want QPN %#x Q_Key %#x and the server's private data", svc, srvQP.QPN(), cm.RDMAUDPQKey)
				}
				if len(svc.MAD) != cm.MADLen || cm.MADHeader(svc.MAD).AttrID() != cm.AttrSIDRREP {
					t.Fatalf("resolved service's MAD %x, want the SIDR_REP", svc.MAD)
				}
			}
			check(t, wait())
			if tc.opts.Loss > 0 {
				if s := cli.cm.Stats().Snapshot(); s.Retransmits == 0 {
					t.Errorf("client stats %+v: no SIDR_REQ was resent over a lossy link (the test proved nothing)", s)
				}
				if s := n.Stats().Snapshot(); s.Lost == 0 || s.Duplicated == 0 {
					t.Errorf("network stats %+v: nothing lost or duplicated", s)
				}
				return
			}
			// Datagrams to what was resolved, and back to where they came from.
			cliQP := cli.udQP(t, cm.RDMAUDPQKey)
			copy(cli.mem[32768:], "datagram to the service")
			check(t, cliQP.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSendWithImm, Imm: cliQP.QPN(),
				Local: transport.SGE{MR: cli.mr, Offset: 32768, Length: 23},
				UD:    &transport.UDDest{Addr: netip.AddrPortFrom(srv.ip, roce.Port), QPN: srvQP.QPN(), QKey: cm.RDMAUDPQKey}}))
			wc := waitWC(t, srv.cq)
			if wc.Opcode != transport.OpRecv || wc.SrcQPN != cliQP.QPN() || wc.Imm != cliQP.QPN() ||
				string(srv.mem[4096*(1+wc.ID-200):][:23]) != "datagram to the service" {
				t.Fatalf("server received %+v", wc)
			}
			copy(srv.mem[32768:], "datagram back")
			check(t, srvQP.PostSend(transport.SendWR{ID: 2, Opcode: transport.OpSend,
				Local: transport.SGE{MR: srv.mr, Offset: 32768, Length: 13},
				UD:    &transport.UDDest{Addr: wc.Src, QPN: wc.SrcQPN, QKey: cm.RDMAUDPQKey}}))
			if wc := waitWC(t, cli.cq); wc.SrcQPN != srvQP.QPN() || string(cli.mem[4096*(1+wc.ID-200):][:13]) != "datagram back" {
				t.Fatalf("client received %+v", wc)
			}
		})
	}
}

func TestSIDRUnsupportedService(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, _ := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	_, err := cli.cm.ResolveUD(ctxT(t), netip.MustParseAddrPort("10.0.0.2:9"), cm.ResolveOptions{})
	if !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) {
		t.Fatalf("resolve a port nobody listens on: %v, want SIDR status 1", err)
	}
	if want := "cm: resolve UD service 10.0.0.2:9: service ID not supported (1): nothing listens on that port"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// An RC listener on the TCP port space is no UD service.
	_, srv := cli, newNode(t, n, "10.0.0.3")
	l, err := srv.cm.Listen(9, 1)
	check(t, err)
	defer l.Close()
	if _, err := cli.cm.ResolveUD(ctxT(t), netip.MustParseAddrPort("10.0.0.3:9"), cm.ResolveOptions{}); !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) {
		t.Errorf("resolve where only an RC listener is: %v", err)
	}
}

func TestSIDRReject(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7175, 1)
	check(t, err)
	defer l.Close()
	go func() {
		if req, err := l.Next(ctxT(t)); err == nil {
			_ = req.Reject(0, []byte("not you"))
		}
	}()
	_, err = cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7175), cm.ResolveOptions{})
	var se *cm.SIDRError
	if !errors.As(err, &se) || se.Status != cm.SIDRReject || !bytes.HasPrefix(se.PrivateData, []byte("not you")) {
		t.Fatalf("resolve: %v, want a SIDR_REP status 2 with the server's private data", err)
	}
	if !strings.Contains(err.Error(), "rejected by the service (2)") {
		t.Errorf("error %q does not name the status", err)
	}
	if s := srv.cm.Stats().Snapshot(); s.Rejects != 1 {
		t.Errorf("server stats %+v, want 1 reject", s)
	}
}

// TestSIDRTimeout: a server whose CM never sees the SIDR_REQs: the client
// sends it 1+MaxRetries times, then gives up with ErrTimeout.
func TestSIDRTimeout(t *testing.T) {
	var dropped atomic.Int32
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if a, ok := madAttr(pkt); ok && a == cm.AttrSIDRREQ {
			dropped.Add(1)
			return false
		}
		return true
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7176, 1)
	check(t, err)
	defer l.Close()
	start := time.Now()
	_, err = cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7176), cm.ResolveOptions{})
	if !errors.Is(err, cm.ErrTimeout) || !strings.Contains(err.Error(), "resolve UD service 10.0.0.2:7176") {
		t.Fatalf("resolve with every SIDR_REQ lost: %v, want ErrTimeout naming the address", err)
	}
	if got := dropped.Load(); got != 16 {
		t.Errorf("%d SIDR_REQs sent, want 1 and 15 retries", got)
	}
	if s := cli.cm.Stats().Snapshot(); s.Retransmits != 15 || s.Timeouts != 1 {
		t.Errorf("client stats %+v, want 15 retransmissions and 1 timeout", s)
	}
	if d := time.Since(start); d < 15*20*time.Millisecond {
		t.Errorf("gave up after %v, before 15 retry timeouts of 20 ms", d)
	}
}

// TestSIDRContext: the caller's context ends a resolution that nobody
// answers.
func TestSIDRContext(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7177, 1)
	check(t, err)
	defer l.Close()
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	// The server's application never answers.
	if _, err := cli.cm.ResolveUD(ctx, netip.AddrPortFrom(srv.ip, 7177), cm.ResolveOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("resolve past the context's deadline: %v", err)
	}
	if s := srv.cm.Stats().Snapshot(); s.Duplicates == 0 {
		t.Errorf("server stats %+v: the client's retries of a request waiting for the application are not counted as duplicates", s)
	}
}

// TestSIDRDuplicateAfterAnswer: the first SIDR_REP is lost; the client's
// retransmitted SIDR_REQ gets the same answer from the server's CM, and
// the server's application sees one request.
func TestSIDRDuplicateAfterAnswer(t *testing.T) {
	var reps [][]byte
	var mu sync.Mutex
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if a, ok := madAttr(pkt); ok && a == cm.AttrSIDRREP {
			mu.Lock()
			defer mu.Unlock()
			reps = append(reps, bytes.Clone(pkt[roce.BTHLen+roce.DETHLen:][:cm.MADLen]))
			return len(reps) > 1
		}
		return true
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7178, 4)
	check(t, err)
	defer l.Close()
	qp := srv.udQP(t, cm.RDMAUDPQKey)
	wait := serveUD(t, l, cli, qp, 1, nil, []byte("once"))
	svc, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7178), cm.ResolveOptions{})
	check(t, err)
	check(t, wait())
	if svc.QPN != qp.QPN() {
		t.Fatalf("resolved QPN %#x, want %#x", svc.QPN, qp.QPN())
	}
	mu.Lock()
	if len(reps) != 2 || !bytes.Equal(reps[0], reps[1]) {
		t.Errorf("%d SIDR_REPs, want the lost one and an identical one for the duplicate", len(reps))
	}
	mu.Unlock()
	ctx, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer cancel()
	if req, err := l.Next(ctx); err == nil {
		t.Errorf("the duplicate reached the application: %+v", req.SIDRREQ)
	}
	if s := srv.cm.Stats().Snapshot(); s.Duplicates == 0 {
		t.Errorf("server stats %+v, want a duplicate", s)
	}
}

func TestSIDRBacklogAndClose(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7179, 1)
	check(t, err)
	to := netip.AddrPortFrom(srv.ip, 7179)
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := cli.cm.ResolveUD(ctxT(t), to, cm.ResolveOptions{}); errs <- err }()
	}
	// One waits in the backlog of one; the other is told no QP is
	// available.
	if err := <-errs; !errors.Is(err, &cm.SIDRError{Status: cm.SIDRNoQP}) {
		t.Fatalf("the request beyond the backlog: %v, want SIDR status 3", err)
	}
	// Closing the listener answers the waiting one.
	check(t, l.Close())
	if err := <-errs; !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) {
		t.Fatalf("the request waiting when the listener closed: %v, want SIDR status 1", err)
	}
	if _, err := l.Next(ctxT(t)); !errors.Is(err, cm.ErrClosed) {
		t.Errorf("Next on a closed listener: %v", err)
	}
}

func TestSIDRAcceptErrors(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	other := newNode(t, n, "10.0.0.3")
	l, err := srv.cm.ListenUD(7180, 1)
	check(t, err)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		_, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7180), cm.ResolveOptions{})
		done <- err
	}()
	req, err := l.Next(ctxT(t))
	check(t, err)
	reset, err := srv.dev.CreateQP(srv.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: srv.cq, RecvCQ: srv.cq})
	check(t, err)
	defer reset.Close()
	qp := srv.udQP(t, cm.RDMAUDPQKey)
	for name, opts := range map[string]cm.SIDRAcceptOptions{
		"no QP":               {},
		"an RC QP":            {QP: srv.qp(t)},
		"another device's QP": {QP: other.udQP(t, cm.RDMAUDPQKey)},
		"a QP in RESET":       {QP: reset},
		"another Q_Key":       {QP: qp, QKey: 0x11111111},
		"too much data":       {QP: qp, PrivateData: make([]byte, cm.SIDRREPPrivateDataLen+1)},
	} {
		if err := req.Accept(opts); err == nil {
			t.Errorf("accept with %s: no error", name)
		}
	}
	if err := req.Reject(cm.SIDRReject, make([]byte, cm.SIDRREPPrivateDataLen+1)); err == nil {
		t.Error("reject with too much private data: no error")
	}
	check(t, req.Accept(cm.SIDRAcceptOptions{QP: qp}))
	if err := req.Accept(cm.SIDRAcceptOptions{QP: qp}); err == nil || !strings.Contains(err.Error(), "already answered") {
		t.Errorf("a second answer: %v", err)
	}
	check(t, <-done)
	if _, err := srv.cm.ListenUD(7180, 1); err == nil {
		t.Error("a second UD listener on one port: no error")
	}
	if _, err := cli.cm.ResolveUD(ctxT(t), netip.MustParseAddrPort("[fd00::2]:7180"), cm.ResolveOptions{}); err == nil {
		t.Error("resolve an IPv6 address from an IPv4 manager: no error")
	}
	if _, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7180), cm.ResolveOptions{PrivateData: make([]byte, cm.SIDRREQIPCMPrivateDataLen+1)}); err == nil {
		t.Error("resolve with too much private data: no error")
	}
}

// TestSIDRManagerClose: a resolution in flight ends with ErrClosed when
// its manager closes.
func TestSIDRManagerClose(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.ListenUD(7181, 1)
	check(t, err)
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		_, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7181), cm.ResolveOptions{})
		done <- err
	}()
	req, err := l.Next(ctxT(t))
	check(t, err)
	check(t, cli.cm.Close())
	if err := <-done; !errors.Is(err, cm.ErrClosed) {
		t.Fatalf("resolve when the manager closed: %v", err)
	}
	if _, err := cli.cm.ResolveUD(ctxT(t), netip.AddrPortFrom(srv.ip, 7181), cm.ResolveOptions{}); !errors.Is(err, cm.ErrClosed) {
		t.Errorf("resolve on a closed manager: %v", err)
	}
	_ = req
}

// TestSIDRREQLikeTheKernels: the SIDR_REQ ResolveUD sends is the kernel's
// (testdata/kernel_sidr_req.hex, udaddy on rxe1 198.18.1.2 resolving port
// 7174 at 198.18.1.3) in every byte but the transaction ID, the request ID
// and the IP CM header's source port, which each side picks.
func TestSIDRREQLikeTheKernels(t *testing.T) {
	text, err := os.ReadFile("testdata/kernel_sidr_req.hex")
	check(t, err)
	kernel, err := hex.DecodeString(strings.TrimSpace(string(text)))
	check(t, err)
	var ours []byte
	var mu sync.Mutex
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if a, ok := madAttr(pkt); ok && a == cm.AttrSIDRREQ {
			mu.Lock()
			ours = bytes.Clone(pkt[roce.BTHLen+roce.DETHLen:][:cm.MADLen])
			mu.Unlock()
		}
		return true
	}})
	cli, _ := newNode(t, n, "198.18.1.2"), newNode(t, n, "198.18.1.3")
	_, err = cli.cm.ResolveUD(ctxT(t), netip.MustParseAddrPort("198.18.1.3:7174"), cm.ResolveOptions{})
	if !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) {
		t.Fatalf("resolve: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range [][]byte{ours, kernel} {
		if len(b) != cm.MADLen {
			t.Fatalf("SIDR_REQ of %d bytes", len(b))
		}
		clear(b[8:16])  // transaction ID
		clear(b[24:28]) // request ID
		clear(b[42:44]) // IP CM source port
	}
	if !bytes.Equal(ours, kernel) {
		t.Errorf("SIDR_REQ differs from the kernel's:\n ours   %x\n kernel %x", ours, kernel)
	}
}
