package cm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGuestRpingServer runs the unmodified rping server (rdma-core's
// librdmacm/examples/rping.c, `rping -s` on rxe1) against an rping client
// written here on the transport and its CM (Dial). The client's side of
// rping's protocol, per iteration (TestGuestRping has the whole exchange):
//
//	fill the source buffer with "rdma-ping-<n>: " and a rotating pattern, NUL-terminated
//	SEND rdma info of the source buffer (addr, rkey, len; 16 bytes, big-endian)
//	wait for the server's "go ahead" (after its RDMA READ of the source)
//	SEND rdma info of the sink buffer
//	wait for the "go ahead" (after its RDMA WRITE of what it read into the sink)
//	check the sink against the source (rping -V)
//
// then it disconnects; the server reports DISCONNECTED, answers with its
// DREP and exits 0.
func TestGuestRpingServer(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	rping, err := exec.LookPath("rping")
	if err != nil {
		t.Fatalf("rping is part of the guest image: %v", err)
	}
	s := newGuestServer(t, ns)
	const port, count, size = 7797, 5, 64

	ctx := guestCtx(t)
	cmd := exec.CommandContext(ctx, rping, "-s", "-a", ns.PeerIP.String(), "-p", fmt.Sprint(port), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size), "-v")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	check(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	iters, cerr := runRpingClient(ctx, t, s, netip.AddrPortFrom(ns.PeerIP, port), count, size)
	if cerr != nil {
		cmd.Process.Kill()
	}
	var serr error
	select {
	case serr = <-waited:
	case <-ctx.Done():
		serr = errors.New("still running after the client disconnected")
	}
	t.Logf("rping server output:\n%s", out.String())
	if cerr != nil {
		t.Fatalf("rping client on the transport: %v (after %d iterations)", cerr, iters)
	}
	if serr != nil {
		t.Fatalf("rping server: %v", serr)
	}
	if n := strings.Count(out.String(), "server ping data: rdma-ping-"); n != count {
		t.Errorf("rping printed %d ping lines, want %d", n, count)
	}
	if st := s.cm.Stats().Snapshot(); st.Timeouts != 0 {
		t.Errorf("CM stats %+v: a message went unanswered", st)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}

// runRpingClient dials the rping server at to (retrying while it is not
// listening yet), runs count iterations with size-byte buffers and
// disconnects; it returns the iterations completed.
func runRpingClient(ctx context.Context, t *testing.T, s *server, to netip.AddrPort, count, size int) (int, error) {
	// Memory: receive slots at 0 and 1024, the rdma info to send at 2048,
	// the source buffer at 4096, the sink at 8192.
	const recvA, recvB, info, source, sink = 0, 1024, 2048, 4096, 8192
	var conn *cm.Conn
	var qp *transport.QP
	var scq, rcq *transport.CQ
	for attempt := 1; ; attempt++ {
		// New CQs each time: a rejected attempt's QP flushes its receives.
		scq, rcq = transport.NewCQ(64), transport.NewCQ(64)
		var err error
		qp, err = s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: scq, RecvCQ: rcq})
		if err != nil {
			return 0, err
		}
		defer qp.Close()
		if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			return 0, err
		}
		for _, off := range []int{recvA, recvB} {
			if err := qp.PostRecv(transport.RecvWR{ID: uint64(off), Local: transport.SGE{MR: s.mr, Offset: off, Length: 1024}}); err != nil {
				return 0, err
			}
		}
		conn, err = s.cm.Dial(ctx, to, cm.DialOptions{QP: qp})
		if err == nil {
			break
		}
		// rping binds and listens a moment after it starts.
		if !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) || attempt == 50 {
			return 0, err
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return 0, err
		}
	}
	t.Logf("connected to the rping server at %v: its QP %#x, ours %#x", conn.RemoteAddr(), conn.RemoteQPN(), qp.QPN())

	wait := func(cq *transport.CQ, what string) (transport.WC, error) {
		var wc [1]transport.WC
		if _, err := cq.PollWait(ctx, wc[:]); err != nil {
			return wc[0], fmt.Errorf("%s: %w", what, err)
		}
		if wc[0].Status != transport.StatusSuccess {
			return wc[0], fmt.Errorf("%s: %v", what, wc[0].Status)
		}
		return wc[0], nil
	}
	// sendInfo SENDs the rdma info of the buffer at off, then waits for
	// the server's go ahead and posts its receive slot again.
	sendInfo := func(off int, what string) error {
		b := s.mem[info:]
		binary.BigEndian.PutUint64(b, s.mr.Addr()+uint64(off))
		binary.BigEndian.PutUint32(b[8:], s.mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(size))
		if err := qp.PostSend(transport.SendWR{Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: s.mr, Offset: info, Length: 16}}); err != nil {
			return err
		}
		if _, err := wait(scq, what+" rdma info"); err != nil {
			return err
		}
		wc, err := wait(rcq, "go ahead after the "+what)
		if err != nil {
			return err
		}
		if wc.ByteLen != 16 {
			return fmt.Errorf("go ahead of %d bytes, want 16", wc.ByteLen)
		}
		return qp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: s.mr, Offset: int(wc.ID), Length: 1024}})
	}
	start := byte(65)
	iters := 0
	for ping := range count {
		src := s.mem[source : source+size]
		n := copy(src, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i, c := n, start; i < size; i++ {
			src[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		src[size-1] = 0
		clear(s.mem[sink : sink+size])
		if err := sendInfo(source, "source"); err != nil {
			return iters, err
		}
		if err := sendInfo(sink, "sink"); err != nil {
			return iters, err
		}
		if !bytes.Equal(s.mem[sink:sink+size], src) {
			return iters, fmt.Errorf("ping %d: the server wrote %q, want %q", ping, s.mem[sink:sink+size], src)
		}
		iters++
	}
	return iters, conn.Disconnect(ctx)
}
