package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// The gateway on the host: two userspace legs on loopback, a client and a
// target that are rdma_cm peers of rbridge's own transport and CM. The
// RoCEv2 port (4791) is the protocol's, so each side takes an address of
// its own on loopback rather than a free port: in a /24 of 127/8 that this
// process picks (loNet), so that test processes running at once do not
// collide.

// loNet is this process's /24 on loopback, "127.x.y.".
var loNet = fmt.Sprintf("127.%d.%d.", 1+(os.Getpid()>>8)%250, os.Getpid()%256)

// lo is host n of loNet, with an optional ":port".
func lo(host string) string { return loNet + host }

// cmApp is an application: a transport device with the IB CM, and memory.
type cmApp struct {
	dev *transport.Device
	cm  *cm.Manager
	pd  *transport.PD
	mr  *transport.MR
	mem []byte
	cq  *transport.CQ
	ip  netip.Addr
	ns  string // the network namespace of its socket ("": the test's)
}

func newCMApp(t testing.TB, ip string) *cmApp { return newCMAppOver(t, ip, nil) }

// newCMAppOver is newCMApp whose device reads its packets through wrap's
// conn (nil: the UDP socket's own).
func newCMAppOver(t testing.TB, ip string, wrap func(roce.PacketConn) roce.PacketConn) *cmApp {
	t.Helper()
	return newCMAppIn(t, "", "", ip, wrap)
}

// newCMAppIn is newCMAppOver whose socket is in network namespace ns ("":
// the test's own), its IPv6 multicast leaving on interface ifname ("": by
// the routing table).
func newCMAppIn(t testing.TB, ns, ifname, ip string, wrap func(roce.PacketConn) roce.PacketConn) *cmApp {
	t.Helper()
	if guest.InGuest() {
		// The gateway itself runs there, as rbridge run (integration/gateway).
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback tests run on the host")
	}
	a := &cmApp{ip: netip.MustParseAddr(ip), pd: transport.NewPD(), mem: make([]byte, 1<<20), cq: transport.NewCQ(1024), ns: ns}
	var uc *udpconn.Conn
	err := netns.Do(ns, func() error {
		o := udpconn.Options{Addr: netip.AddrPortFrom(a.ip, roce.Port)}
		if ifname != "" {
			ifi, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			o.Interface = ifi.Index
		}
		var err error
		uc, err = udpconn.Listen(o)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var c roce.PacketConn = uc
	if wrap != nil {
		c = wrap(uc)
	}
	if a.dev, err = transport.NewDevice(c, transport.DeviceOptions{Logger: testlog.New(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.dev.Close() })
	if a.cm, err = cm.New(cm.Options{Device: a.dev, Addr: a.ip, Logger: testlog.New(t), RetryTimeout: 50 * time.Millisecond, MaxRetries: 3}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cm.Close() })
	if a.mr, err = a.pd.RegisterMR(a.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead|transport.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *cmApp) qp(t *testing.T) *transport.QP {
	t.Helper()
	qp, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: a.cq, RecvCQ: a.cq})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

func gatewayConfig(t *testing.T, allow string) *config.Config {
	t.Helper()
	y := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
` + allow
	c, err := config.Parse("gw.yaml", []byte(strings.ReplaceAll(y, "127.0.10.", loNet)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startGateway(t *testing.T, cfg *config.Config) *bridge.Gateway {
	t.Helper()
	return startGatewayWith(t, cfg, bridge.GatewayOptions{})
}

// startGatewayWith starts a gateway with o's options (its Config, Logger
// and ConnectTimeout are the tests' own, and its Pool too unless o or the
// file gives one). A test's pool traces its buffers (a leak names its holder); a
// benchmark's does not, as `rbridge run`'s does not (the trace's call
// stacks were a fifth of a UD benchmark's CPU).
func startGatewayWith(t testing.TB, cfg *config.Config, o bridge.GatewayOptions) *bridge.Gateway {
	t.Helper()
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback gateways run on the host")
	}
	o.Config, o.Logger, o.ConnectTimeout = cfg, testlog.New(t), 2*time.Second
	if o.Pool.Size == 0 && cfg.Pool.Size == 0 {
		o.Pool = pool.Options{Size: 8 << 20}
	}
	if _, bench := t.(*testing.B); !bench {
		o.Pool.Trace = true
	}
	g, err := bridge.StartGateway(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			t.Errorf("gateway close: %v", err)
		}
	})
	return g
}

func TestGatewayConnectsThrough(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The state once what starts with the gateway (its sockets' first
	// reads, which take their receive buffers) has.
	idle := g.State()
	for deadline := time.Now().Add(5 * time.Second); idle.Sessions != 0 || idle.PoolInUse != 0 || idle.UserspaceQPs != 2 || idle.UserspaceCMConns != 0; idle = g.State() {
		if time.Now().After(deadline) {
			t.Errorf("an idle gateway's state: %+v, want no session, no pool buffer held, two QPs (each leg's QP 1), no CM connection", idle)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	for round := range 3 { // connections opened and closed again
		accepted := make(chan *cm.Conn, 1)
		tqp := target.qp(t)
		go func() {
			r, err := ln.Next(ctx)
			if err != nil {
				t.Error(err)
				accepted <- nil
				return
			}
			// The client's private data, unchanged.
			if want := fmt.Sprintf("hello %d", round); !bytes.HasPrefix(r.PrivateData, []byte(want)) {
				t.Errorf("the target got private data %q, want %q first", r.PrivateData, want)
			}
			if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
				t.Error(err)
			}
			if err := tqp.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: target.mr, Offset: 0, Length: 4096}},
				transport.RecvWR{ID: 2, Local: transport.SGE{MR: target.mr, Offset: 4096, Length: 4096}}); err != nil {
				t.Error(err)
			}
			c, err := r.Accept(ctx, cm.AcceptOptions{QP: tqp, PrivateData: []byte(fmt.Sprintf("world %d", round))})
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		cqp := client.qp(t)
		cc, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: cqp, PrivateData: []byte(fmt.Sprintf("hello %d", round))})
		if err != nil {
			t.Fatalf("round %d: dial through the gateway: %v", round, err)
		}
		tc := <-accepted
		if tc == nil {
			t.FailNow()
		}
		if want := fmt.Sprintf("world %d", round); !bytes.HasPrefix(cc.PrivateData(), []byte(want)) {
			t.Errorf("the client got private data %q, want %q first", cc.PrivateData(), want)
		}
		// A SEND and a one-sided WRITE cross.
		copy(client.mem, "through the gateway")
		if err := cqp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Length: 19}, Signaled: true},
			transport.SendWR{ID: 2, Opcode: transport.OpWriteWithImm, Imm: 5, Local: transport.SGE{MR: client.mr, Length: 19}, Remote: target.mr.Addr() + 8192, RKey: target.mr.RKey(), Signaled: true}); err != nil {
			t.Fatal(err)
		}
		wcs := make([]transport.WC, 4)
		for _, w := range []struct {
			cq *transport.CQ
			n  int
		}{{client.cq, 2}, {target.cq, 2}} { // the SEND and the WRITE; the target's receives (which order its reads)
			for got := 0; got < w.n; {
				k, err := w.cq.PollWait(ctx, wcs[:w.n-got])
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				for _, wc := range wcs[:k] {
					if wc.Status != transport.StatusSuccess {
						t.Fatalf("round %d: completion %+v: %v", round, wc, wc.Status)
					}
				}
				got += k
			}
		}
		if string(target.mem[:19]) != "through the gateway" || string(target.mem[8192:8192+19]) != "through the gateway" {
			t.Fatalf("round %d: the target holds %q and %q", round, target.mem[:19], target.mem[8192:8192+19])
		}
		endRound(t, ctx, g, cc, tc, round)
		if round == 0 {
			// The state after one session, warm, read once nothing is
			// held (a frame a receive loop lets go just after the last
			// packet it carried was seen would be counted otherwise).
			time.Sleep(50 * time.Millisecond) // what started with the gateway has
			waitState(t, g, "no session, no pool buffer held, no CM connection after round 0", func(s bridge.GatewayState) bool {
				idle = s
				return s.Sessions == 0 && s.PoolInUse == 0 && s.UserspaceCMConns == 0 && s.UserspaceQPs == 2
			})
		}
	}
	if s := g.Stats(); s.Accepted.Load() != 3 || s.Ended.Load() != 3 {
		t.Errorf("gateway counted %d accepted, %d ended; want 3 and 3", s.Accepted.Load(), s.Ended.Load())
	}
	// Everything the later sessions held is back: the state is the one
	// after the first (goroutines: at most as many as then).
	var st bridge.GatewayState
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st = g.State()
		back := st.Goroutines <= idle.Goroutines
		// What the sockets hold for their next reads moves with the
		// traffic (PoolInUse leaves it out).
		st.Goroutines, st.PoolReceiving = idle.Goroutines, idle.PoolReceiving
		if back && st == idle {
			break
		}
		if time.Now().After(deadline) {
			var b bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("after two more sessions, the gateway holds %+v, idle it held %+v\n%s", g.State(), idle, b.String())
		}
	}
}

func TestGatewayPassesRejectsOn(t *testing.T) {
	client := newCMApp(t, lo("3"))
	newCMApp(t, lo("4")) // the target's host: nothing listens on the port
	startGateway(t, gatewayConfig(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) {
		t.Fatalf("dial to a target with no listener: %v, want the target's reject (invalid service ID)", err)
	}
}

func TestGatewayTimesOutASilentTarget(t *testing.T) {
	client := newCMApp(t, lo("3")) // nothing at all at the target's address
	startGateway(t, gatewayConfig(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectTimeout}) {
		t.Fatalf("dial to a target that does not answer: %v, want a timeout reject", err)
	}
}

func TestGatewayRefusesClientsOutsideAllow(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	if _, err := target.cm.Listen(7471, 8); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, "    allow: [127.0.10.99/32]\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectConsumerDefined}) {
		t.Fatalf("a client outside allow: %v, want a reject", err)
	}
	if g.Stats().Refused.Load() != 1 {
		t.Errorf("refused %d, want 1", g.Stats().Refused.Load())
	}
}

// TestGatewayHoldsAClientWhileTheTargetIsSlow: a target that takes longer
// to accept than the client's CM waits for an answer (its REQ retries
// would run out) still gets the client: the gateway answers the client's
// repeated REQs with an MRA, which tells it to wait the gateway's service
// timeout, and accepts it once the target accepted.
func TestGatewayHoldsAClientWhileTheTargetIsSlow(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4")) // client: 50 ms per try, 3 retries
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	startGateway(t, gatewayConfig(t, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const slow = 800 * time.Millisecond // four times what the client's retries last
	accepted := make(chan error, 1)
	tqp := target.qp(t)
	go func() {
		r, err := ln.Next(ctx)
		if err != nil {
			accepted <- err
			return
		}
		time.Sleep(slow)
		if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			accepted <- err
			return
		}
		_, err = r.Accept(ctx, cm.AcceptOptions{QP: tqp})
		accepted <- err
	}()
	start := time.Now()
	cc, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	if err != nil {
		t.Fatalf("dial through the gateway to a target that accepts after %v: %v", slow, err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < slow {
		t.Fatalf("connected after %v, before the target accepted (%v)", took, slow)
	}
	if st := client.cm.Stats().Snapshot(); st.Retransmits == 0 {
		t.Errorf("the client never sent its REQ again (stats %+v): the MRA was not needed, the test proved nothing", st)
	}
	_ = cc.Disconnect(ctx)
}

// endRound waits for the round's session to be listed, disconnects the
// client, and waits until the target's connection and the session ended.
func endRound(t *testing.T, ctx context.Context, g *bridge.Gateway, cc, tc *cm.Conn, round int) {
	t.Helper()
	// The session relays from its start; the gateway lists it a moment
	// later.
	waitUntil(t, fmt.Sprintf("round %d: one session", round), func() bool { return g.Sessions() == 1 })
	// The client disconnects: the target's connection ends too.
	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tc.Done():
	case <-ctx.Done():
		t.Fatalf("round %d: the target's connection outlived the client's", round)
	}
	waitUntil(t, "the session gone", func() bool { return g.Sessions() == 0 })
}
