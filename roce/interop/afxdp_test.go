package interop_test

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// afxdpConn attaches rbridge's classifier to the user namespace's veth (in
// mode, 0 for the loader's choice) and opens an AF_XDP conn on each of its
// receive queues, on one UMEM (xdp.OpenQueues): the transport's packets
// bypass the kernel's UDP stack both ways, whichever queue they reach.
func afxdpConn(t testing.TB, prog **xdp.Program, mode xdp.Mode) func(guest.Netns) []roce.PacketConn {
	return func(ns guest.Netns) []roce.PacketConn {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		p, err := xdp.Load(xdp.Options{Logger: quiet, Mode: mode})
		check(t, err)
		t.Cleanup(func() { p.Close() })
		*prog = p
		// rxe1 answers from its netdev's MAC (the bridge's).
		mac, err := os.ReadFile("/sys/class/net/" + ns.PeerNetdev + "/address")
		check(t, err)
		hw, err := net.ParseMAC(strings.TrimSpace(string(mac)))
		check(t, err)
		umem, err := unix.Mmap(-1, 0, 2048*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		check(t, err)
		frames := newUMEMFrames(len(umem) / 4096)
		var conns []roce.PacketConn
		check(t, ns.Do(func() error {
			ifi, err := net.InterfaceByName(ns.Netdev)
			if err != nil {
				return err
			}
			mode, err := p.Attach(ifi.Index)
			if err != nil {
				return err
			}
			n, why, err := xdp.RxQueues(ifi.Index)
			if err != nil {
				return err
			}
			t.Logf("classifier on %s in %v mode; %s", ns.Netdev, mode, why)
			cs, err := xdp.OpenQueues(xdp.ConnOptions{Ifindex: ifi.Index, UMEM: umem, Frames: frames, RingSize: 256,
				LocalAddr: netip.AddrPortFrom(ns.IP, roce.Port), Neighbors: xdp.StaticNeighbors{ns.PeerIP: hw},
				Program: p, Logger: quiet}, n)
			for _, c := range cs {
				t.Logf("AF_XDP socket in %v mode", c.Mode())
				conns = append(conns, c)
			}
			return err
		}))
		t.Cleanup(func() { unix.Munmap(umem) })
		return conns
	}
}

// umemFrames hands out the frames of a UMEM of n 4 KiB frames, which the
// sockets of its queues share (xdp.FrameAllocator).
type umemFrames struct {
	mu   sync.Mutex
	free []uint64
}

func newUMEMFrames(n int) *umemFrames {
	f := &umemFrames{}
	for i := n - 1; i >= 0; i-- {
		f.free = append(f.free, uint64(i*4096))
	}
	return f
}

func (f *umemFrames) AllocFrame() (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.free) == 0 {
		return 0, false
	}
	off := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	return off, true
}

func (f *umemFrames) FreeFrame(off uint64) {
	f.mu.Lock()
	f.free = append(f.free, off)
	f.mu.Unlock()
}

// TestGuestTransportWithRXEOverAFXDP: every RC opcode both ways between the
// kernel's rxe1 and the transport on AF_XDP.
func TestGuestTransportWithRXEOverAFXDP(t *testing.T) {
	var prog *xdp.Program
	k, g := connectToRXEOver(t, afxdpConn(t, &prog, 0))
	check(t, prog.AddQP(g.qp.QPN(), xdp.QP{RemoteQPN: k.qp.QPN()}))
	exercise(t, k, g)
	c, err := prog.Counters()
	check(t, err)
	t.Logf("classifier: %d redirected to AF_XDP, %d not RoCEv2 passed to the kernel", c.Redirected, c.NotRoCE)
	if c.Redirected == 0 {
		t.Fatal("nothing went through AF_XDP")
	}
}

// TestGuestClassifierLoads loads the classifier with every option that
// changes the code the verifier walks (the CNP built in XDP among them) on
// the guest's kernel: Debian 12's Linux 6.1, whose verifier refuses what
// newer ones accept.
func TestGuestClassifierLoads(t *testing.T) {
	guest.RequireKind(t, "rxe") // once per guest run; the kernel is the same in every pass
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, opts := range []xdp.Options{{}, {CNP: true}, {CNP: true, Mode: xdp.ModeGeneric}} {
		opts.Logger = quiet
		p, err := xdp.Load(opts)
		if err != nil {
			t.Fatalf("load with %+v: %v", opts, err)
		}
		check(t, p.Close())
	}
}
