package cm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGuestRping runs the unmodified rping client (rdma-core's
// librdmacm/examples/rping.c, over rxe1) against an rping server written
// here on the transport and its CM. rping's protocol, per iteration:
//
//	client -> SEND rdma info (addr, rkey, len of its source buffer; 16 bytes, big-endian)
//	server -> RDMA READ of the source buffer, then SEND "go ahead" (16 bytes)
//	client -> SEND rdma info of its sink buffer
//	server -> RDMA WRITE of what it read into the sink, then SEND "go ahead"
//
// and the client checks the sink against the source (-V), then
// disconnects after -C iterations.
func TestGuestRping(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	rping, err := exec.LookPath("rping")
	if err != nil {
		t.Fatalf("rping is part of the guest image: %v", err)
	}
	s := newGuestServer(t, ns)
	const port, count = 7794, 5
	l, err := s.cm.Listen(port, 1)
	check(t, err)

	ctx := guestCtx(t)
	cmd := exec.CommandContext(ctx, rping, "-c", "-a", ns.IP.String(), "-p", fmt.Sprint(port), "-C", fmt.Sprint(count), "-v", "-V")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	check(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	iters, serr := serveRping(ctx, t, s, l)
	err = <-waited
	t.Logf("rping client output:\n%s", out.String())
	if serr != nil {
		t.Fatalf("rping server: %v (after %d iterations)", serr, iters)
	}
	if err != nil {
		t.Fatalf("rping client: %v", err)
	}
	if iters != count {
		t.Errorf("server ran %d iterations, want %d", iters, count)
	}
	if n := strings.Count(out.String(), "ping data: rdma-ping-"); n != count {
		t.Errorf("rping printed %d ping lines, want %d", n, count)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}

// serveRping accepts one rping client and serves it until it disconnects;
// it returns the number of iterations completed.
func serveRping(ctx context.Context, t *testing.T, s *server, l *cm.Listener) (int, error) {
	req, err := l.Next(ctx)
	if err != nil {
		return 0, err
	}
	scq, rcq := transport.NewCQ(64), transport.NewCQ(64)
	qp, err := s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: scq, RecvCQ: rcq})
	if err != nil {
		return 0, err
	}
	defer qp.Close()
	if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
		return 0, err
	}
	// Memory: receive slots at 0 and 1024, the "go ahead" at 2048, the
	// ping buffer at 4096.
	const recvA, recvB, goAhead, pingBuf = 0, 1024, 2048, 4096
	post := func(off int) error {
		return qp.PostRecv(transport.RecvWR{ID: uint64(off), Local: transport.SGE{MR: s.mr, Offset: off, Length: 1024}})
	}
	if err := post(recvA); err != nil {
		return 0, err
	}
	if err := post(recvB); err != nil {
		return 0, err
	}
	conn, err := req.Accept(ctx, cm.AcceptOptions{QP: qp})
	if err != nil {
		return 0, err
	}
	t.Logf("rping client connected from %v: its QP %#x, ours %#x", conn.RemoteAddr(), conn.RemoteQPN(), qp.QPN())
	// Waits end when the client disconnects.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-conn.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	wait := func(cq *transport.CQ, what string) (transport.WC, error) {
		var wc [1]transport.WC
		if _, err := cq.PollWait(wctx, wc[:]); err != nil {
			return wc[0], fmt.Errorf("%s: %w", what, err)
		}
		if wc[0].Status != transport.StatusSuccess {
			return wc[0], fmt.Errorf("%s: %v", what, wc[0].Status)
		}
		return wc[0], nil
	}
	info := func(wc transport.WC) (addr uint64, rkey, n uint32, err error) {
		if wc.ByteLen != 16 {
			return 0, 0, 0, fmt.Errorf("rdma info of %d bytes, want 16", wc.ByteLen)
		}
		b := s.mem[wc.ID:]
		if err := post(int(wc.ID)); err != nil {
			return 0, 0, 0, err
		}
		return binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:]), nil
	}
	binary.BigEndian.PutUint64(s.mem[goAhead:], s.mr.Addr()+pingBuf)
	binary.BigEndian.PutUint32(s.mem[goAhead+8:], s.mr.RKey())
	binary.BigEndian.PutUint32(s.mem[goAhead+12:], 1024)
	send := func(wrs ...transport.SendWR) error {
		for _, wr := range wrs {
			wr.Signaled = true
			if err := qp.PostSend(wr); err != nil {
				return err
			}
			if _, err := wait(scq, wr.Opcode.String()); err != nil {
				return err
			}
		}
		return nil
	}
	goAheadWR := transport.SendWR{Opcode: transport.OpSend, Local: transport.SGE{MR: s.mr, Offset: goAhead, Length: 16}}
	iters := 0
	for {
		wc, err := wait(rcq, "source rdma info")
		if err != nil {
			select {
			case <-conn.Done():
				return iters, nil // the client is done and disconnected (its DREQ flushed our receives)
			default:
				return iters, err
			}
		}
		addr, rkey, n, err := info(wc)
		if err != nil || n > 1024 {
			return iters, fmt.Errorf("source rdma info: %d bytes, %v", n, err)
		}
		if err := send(transport.SendWR{Opcode: transport.OpRead, Local: transport.SGE{MR: s.mr, Offset: pingBuf, Length: int(n)}, Remote: addr, RKey: rkey},
			goAheadWR); err != nil {
			return iters, err
		}
		wc, err = wait(rcq, "sink rdma info")
		if err != nil {
			return iters, err
		}
		if addr, rkey, _, err = info(wc); err != nil {
			return iters, err
		}
		ping := s.mem[pingBuf : pingBuf+int(n)]
		length := bytes.IndexByte(ping, 0) + 1
		if length == 0 {
			length = int(n)
		}
		if err := send(transport.SendWR{Opcode: transport.OpWrite, Local: transport.SGE{MR: s.mr, Offset: pingBuf, Length: length}, Remote: addr, RKey: rkey},
			goAheadWR); err != nil {
			return iters, err
		}
		iters++
	}
}
