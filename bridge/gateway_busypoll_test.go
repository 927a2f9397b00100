package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGatewayBusyPolledLegs: with busy_poll on both userspace legs (both
// io: udp; and one io: udp, the other io: afxdp), each leg's loop spins
// on a thread of its own (the leg's status names it) and sessions relay
// through it: a SEND of the pool's largest class (64 KiB), a WRITE and a
// READ longer than that, and a SEND_WITH_IMM, in order and every byte
// checked, in three sessions opened and ended in turn. Once the gateway
// closed, no loop's goroutine is left and their threads have exited. In
// the udp case one leg's loop naps when idle (busy_poll_idle: 1ms): it
// has napped before the first session, and each session (its CM exchange
// and its first packets too) wakes it.
func TestGatewayBusyPolledLegs(t *testing.T) {
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback gateways run on the host")
	}
	t.Run("udp", func(t *testing.T) {
		y := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp, busy_poll: true, busy_poll_idle: 1ms}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp, busy_poll: true}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
`
		busyPolledLegs(t, newCMApp(t, lo("3")), newCMApp(t, lo("4")), strings.ReplaceAll(y, "127.0.10.", loNet), 8<<20)
	})
	// The target behind an AF_XDP leg that busy-polls its RX ring, its
	// frames lent to the sessions as a leg that waits lends them.
	t.Run("afxdp", func(t *testing.T) {
		gwNS, peerNS, gwIf, _ := vethNamespaces(t, "XDP, AF_XDP, network namespaces", "rbp", "10.96.0.1/24", "10.96.0.2/24")
		target := newCMAppIn(t, peerNS, "", "10.96.0.2", nil)
		y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp, busy_poll: true}
  - {name: b, kind: userspace, interface: GWIF, ip: 10.96.0.1, io: afxdp, netns: GWNS, busy_poll: true}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "10.96.0.2:7471"}
`)
		// The AF_XDP socket takes 1024 of the pool's 4 KiB frames.
		busyPolledLegs(t, newCMApp(t, lo("3")), target, y, 16<<20)
	})
}

// busyPolledLegs runs TestGatewayBusyPolledLegs's sessions through a
// gateway of config y (its route listening on lo("1:7471")) between
// client and target, with a pool of poolSize bytes.
func busyPolledLegs(t *testing.T, client, target *cmApp, y string, poolSize int) {
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: cfg, Logger: testlog.New(t), ConnectTimeout: 2 * time.Second,
		Pool: pool.Options{Size: poolSize, Trace: true}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			g.Close(context.Background())
		}
	})
	var threads []int
	napping := map[string]bool{} // legs with a busy_poll_idle
	for _, l := range cfg.Legs {
		napping[l.Name] = l.BusyPollIdle > 0
	}
	for _, l := range g.Status().Legs {
		if l.BusyPollThread == 0 || l.BusyPoll == "" {
			t.Fatalf("leg %q: busy_poll %q, thread %d: want the loop's thread named", l.Name, l.BusyPoll, l.BusyPollThread)
		}
		threads = append(threads, l.BusyPollThread)
	}
	// legNaps is how many quiet spells each leg's loop napped through.
	legNaps := func() map[string]uint64 {
		n := map[string]uint64{}
		for _, l := range g.Status().Legs {
			n[l.Name] = l.BusyPollNaps
		}
		return n
	}
	for name, naps := range napping {
		if naps {
			waitUntil(t, fmt.Sprintf("leg %q's loop napping before any session", name), func() bool { return legNaps()[name] > 0 })
		}
	}
	napsBefore := legNaps()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const (
		sendLen  = 64 << 10 // the pool's largest class: the longest SEND a userspace far leg takes (MaxSGE 1)
		writeLen = 200 << 10
		readLen  = 200 << 10
	)
	for round := range 3 {
		accepted := make(chan *cm.Conn, 1)
		tqp := target.qp(t)
		go func() {
			r, err := ln.Next(ctx)
			if err != nil {
				t.Error(err)
				accepted <- nil
				return
			}
			if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
				t.Error(err)
			}
			for i := range 2 {
				if err := tqp.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: target.mr, Offset: i * (128 << 10), Length: 128 << 10}}); err != nil {
					t.Error(err)
				}
			}
			c, err := r.Accept(ctx, cm.AcceptOptions{QP: tqp})
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		cqp := client.qp(t)
		cc, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: cqp})
		if err != nil {
			t.Fatalf("round %d: dial through the gateway: %v", round, err)
		}
		tc := <-accepted
		if tc == nil {
			t.FailNow()
		}
		for i := range client.mem {
			client.mem[i] = byte(i*7 + round)
		}
		for i := 512 << 10; i < 768<<10; i++ {
			target.mem[i] = byte(i*13 + round)
		}
		const writeAt, readFrom, readTo = 256 << 10, 512 << 10, 512 << 10
		if err := cqp.PostSend(
			transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Length: sendLen}, Signaled: true},
			transport.SendWR{ID: 2, Opcode: transport.OpWrite, Local: transport.SGE{MR: client.mr, Offset: 4096, Length: writeLen}, Remote: target.mr.Addr() + writeAt, RKey: target.mr.RKey(), Signaled: true},
			transport.SendWR{ID: 3, Opcode: transport.OpRead, Local: transport.SGE{MR: client.mr, Offset: readTo, Length: readLen}, Remote: target.mr.Addr() + readFrom, RKey: target.mr.RKey(), Signaled: true},
			transport.SendWR{ID: 4, Opcode: transport.OpSendWithImm, Imm: 42, Local: transport.SGE{MR: client.mr, Offset: 64, Length: 64}, Signaled: true},
		); err != nil {
			t.Fatal(err)
		}
		var got []transport.WC
		for _, w := range []struct {
			cq *transport.CQ
			n  int
		}{{client.cq, 4}, {target.cq, 2}} {
			wcs := make([]transport.WC, w.n)
			for k := 0; k < w.n; {
				n, err := w.cq.PollWait(ctx, wcs[k:])
				if err != nil {
					t.Fatalf("round %d: %d of %d completions: %v", round, k, w.n, err)
				}
				k += n
			}
			for _, wc := range wcs {
				if wc.Status != transport.StatusSuccess {
					t.Fatalf("round %d: completion %+v: %v", round, wc, wc.Status)
				}
			}
			got = append(got, wcs...)
		}
		// In order, on both sides: the client's four, the target's two
		// receives.
		for i, want := range []uint64{1, 2, 3, 4, 0, 1} {
			if got[i].ID != want {
				t.Errorf("round %d: completion %d is work request %d, want %d (order)", round, i, got[i].ID, want)
			}
		}
		if g := got[5]; g.ByteLen != 64 || !g.HasImm || g.Imm != 42 {
			t.Errorf("round %d: the second SEND arrived as %d bytes, imm %v %d; want 64, 42", round, g.ByteLen, g.HasImm, g.Imm)
		}
		for _, c := range []struct {
			what      string
			got, want []byte
		}{
			{"SEND", target.mem[:sendLen], client.mem[:sendLen]},
			{"SEND_WITH_IMM", target.mem[128<<10 : 128<<10+64], client.mem[64:128]},
			{"WRITE", target.mem[writeAt : writeAt+writeLen], client.mem[4096 : 4096+writeLen]},
			{"READ", client.mem[readTo : readTo+readLen], target.mem[readFrom : readFrom+readLen]},
		} {
			if !bytes.Equal(c.got, c.want) {
				t.Errorf("round %d: the %s's bytes differ at the far side", round, c.what)
			}
		}
		endRound(t, ctx, g, cc, tc, round)
	}
	if s := g.Stats(); s.Accepted.Load() != 3 || s.Ended.Load() != 3 {
		t.Errorf("gateway counted %d accepted, %d ended; want 3 and 3", s.Accepted.Load(), s.Ended.Load())
	}
	// A napping loop woke for the sessions and napped again after them;
	// one that does not nap never did.
	for name, naps := range napping {
		if !naps {
			if n := legNaps()[name]; n != 0 {
				t.Errorf("leg %q without busy_poll_idle napped %d times", name, n)
			}
			continue
		}
		waitUntil(t, fmt.Sprintf("leg %q's loop napping again after the sessions", name), func() bool { return legNaps()[name] > napsBefore[name] })
		for _, l := range g.Status().Legs {
			if l.Name == name && !strings.Contains(l.BusyPoll, "naps after 1ms idle") {
				t.Errorf("leg %q's busy_poll status %q does not say when it naps", name, l.BusyPoll)
			}
		}
	}
	for _, tid := range threads {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); err != nil {
			t.Errorf("the busy-poll thread %d before Close: %v", tid, err)
		}
	}

	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	closed = true
	if err := g.Close(cctx); err != nil {
		t.Errorf("gateway close: %v", err)
	}
	// The loops ended with Close, and their locked threads with them. A
	// loop's goroutine says it ended (its deferred close of done) just
	// before it exits, so a look right after Close may still see it go.
	var b bytes.Buffer
	waitUntil(t, "no busy-poll loop's goroutine left after Close", func() bool {
		b.Reset()
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		return !strings.Contains(b.String(), "routineSpin")
	})
	// A locked thread exits once its goroutine is gone, a moment after
	// the loop said it ended; the process's main thread never does (Go
	// parks it), and a loop there would spin no more but stay.
	for _, tid := range threads {
		if tid == os.Getpid() {
			// Parked: asleep in the kernel, not running.
			waitUntil(t, fmt.Sprintf("the busy-poll loop's thread %d (the main thread) asleep after Close", tid), func() bool {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
				i := bytes.LastIndexByte(stat, ')')
				return err == nil && i > 0 && i+2 < len(stat) && stat[i+2] != 'R'
			})
			continue
		}
		waitUntil(t, fmt.Sprintf("the busy-poll thread %d gone after Close", tid), func() bool {
			_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
			return os.IsNotExist(err)
		})
	}
}
