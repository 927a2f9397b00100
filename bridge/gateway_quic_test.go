package bridge_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/internal/testcert"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// Two gateways in one process, joined by their quic legs on loopback: a
// client on gateway A's userspace leg reaches a target on gateway B's.
// Addresses: client .3, A's userspace leg .1 and quic leg .5, B's quic
// leg .6 (it listens) and userspace leg .2, target .4.

// tunnelFiles writes a CA and one certificate per name into a temporary
// directory: name -> {cert, key}, and the CA's file.
func tunnelFiles(t *testing.T, names ...string) (map[string][2]string, string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcert.NewCA("rbridge test CA")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][2]string{}
	var caFile string
	for _, n := range names {
		leaf, err := ca.Issue(testcert.Options{DNS: []string{n}, IPs: []net.IP{net.ParseIP(lo("5")), net.ParseIP(lo("6"))}})
		if err != nil {
			t.Fatal(err)
		}
		c, k, cf, err := ca.Files(dir, n, leaf)
		if err != nil {
			t.Fatal(err)
		}
		files[n], caFile = [2]string{c, k}, cf
	}
	return files, caFile
}

func quicGateways(t *testing.T, aFiles, bFiles [2]string, aCA, bCA string) (ga, gb *bridge.Gateway) {
	t.Helper()
	ga = startGateway(t, parseConfig(t, `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: q, kind: quic, ip: 127.0.10.5, peer: "127.0.10.6:7400", peer_name: gw-b, cert: `+aFiles[0]+`, key: `+aFiles[1]+`, ca: `+aCA+`}
routes:
  - {name: out, listen: {leg: a, addr: "127.0.10.1:7471"}, target: {leg: q, addr: "127.0.10.4:7471"}}
  - {name: nowhere, listen: {leg: a, addr: "127.0.10.1:7472"}, target: {leg: q, addr: "127.0.10.4:7999"}}
`))
	gb = startGateway(t, parseConfig(t, `legs:
  - {name: q, kind: quic, ip: 127.0.10.6, listen: "127.0.10.6:7400", cert: `+bFiles[0]+`, key: `+bFiles[1]+`, ca: `+bCA+`}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - {name: in, listen: {leg: q, addr: "127.0.10.4:7471"}, target: {leg: b, addr: "127.0.10.4:7471"}}
`))
	return ga, gb
}

func TestGatewaysThroughQUIC(t *testing.T) {
	files, caFile := tunnelFiles(t, "gw-a", "gw-b")
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	ga, gb := quicGateways(t, files["gw-a"], files["gw-b"], caFile, caFile)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for round := range 2 {
		cc, tc, cqp := dialThrough(t, ctx, client, target, ln, "1:7471")
		// The client's SEND and WRITE_WITH_IMM reach the target's memory.
		sessionOps(t, ctx, client, target, cqp)
		// A WRITE of the target's memory, a READ of it back, and a
		// FETCH_ADD, with the target's own address and rkey. The test reads
		// and writes only the client's memory, and only between its
		// completions: the target's is its transport's (a test that wrote
		// it while the target read it for the last round's READ raced).
		src := 64<<10 + round<<10 // each round its own bytes
		copy(client.mem[24<<10:], "the target's bytes")
		if err := cqp.PostSend(
			transport.SendWR{ID: 2, Opcode: transport.OpWrite, Local: transport.SGE{MR: client.mr, Offset: 24 << 10, Length: 18}, Remote: target.mr.Addr() + uint64(src), RKey: target.mr.RKey(), Signaled: true},
			transport.SendWR{ID: 3, Opcode: transport.OpRead, Local: transport.SGE{MR: client.mr, Offset: 32 << 10, Length: 18}, Remote: target.mr.Addr() + uint64(src), RKey: target.mr.RKey(), Signaled: true},
			transport.SendWR{ID: 4, Opcode: transport.OpFetchAdd, SwapAdd: 5, Local: transport.SGE{MR: client.mr, Offset: 40 << 10, Length: 8}, Remote: target.mr.Addr() + 72<<10, RKey: target.mr.RKey(), Signaled: true},
		); err != nil {
			t.Fatal(err)
		}
		wcs := make([]transport.WC, 3)
		for got := 0; got < 3; {
			k, err := client.cq.PollWait(ctx, wcs[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		for _, wc := range wcs {
			if wc.Status != transport.StatusSuccess {
				t.Fatalf("op %d: %v", wc.ID, wc.Status)
			}
		}
		if got := string(client.mem[32<<10 : 32<<10+18]); got != "the target's bytes" {
			t.Errorf("READ through both gateways gave %q", got)
		}
		if got := binary.LittleEndian.Uint64(client.mem[40<<10:]); got != uint64(5*round) {
			t.Errorf("the FETCH_ADD found the target's counter at %d after %d FETCH_ADDs of 5", got, round)
		}
		waitUntil(t, "the session in gateway A's table", func() bool { return ga.Sessions() == 1 })
		st := ga.Status()
		if len(st.Sessions) != 1 || st.Legs[1].PeerConns == nil || *st.Legs[1].PeerConns != 1 {
			t.Errorf("gateway A's status: %d sessions, quic leg %+v", len(st.Sessions), st.Legs[1])
		}
		if l := st.Legs[1]; l.State != "connected (1)" || !l.Up {
			t.Errorf("gateway A's quic leg with its tunnel up: link %q, up %v", l.State, l.Up)
		}
		if n := gb.Sessions(); n != 1 {
			t.Errorf("gateway B runs %d sessions, want 1", n)
		}
		// The client disconnects: both gateways' sessions end, and the
		// target's connection with them.
		if round == 0 {
			_ = cc.Disconnect(ctx)
		} else {
			_ = tc.Disconnect(ctx) // the target, the other way
		}
		waitUntil(t, "both gateways' sessions ended", func() bool { return ga.Sessions() == 0 && gb.Sessions() == 0 })
		if round == 0 {
			waitUntil(t, "the target's connection ended", func() bool { return target.cm.NumConns() == 0 })
		} else {
			waitUntil(t, "the client's connection ended", func() bool { return client.cm.NumConns() == 0 })
		}
	}

	// Both gateways' quic legs counted what crossed: two rounds of a SEND,
	// a WRITE_WITH_IMM, a WRITE, a READ and a FETCH_ADD from A to B, each
	// completed (a READ asked for again, when its responses were slow to
	// come, is read again through the tunnel: at least ten, then).
	for _, g := range []struct {
		name, leg string
		gw        *bridge.Gateway
		sent      bool
	}{{"A", "q", ga, true}, {"B", "q", gb, false}} {
		m, raw := scrape(t, startAdmin(t, g.gw))
		promtool(t, raw)
		ops, comps := `rbridge_quic_ops_sent_total{leg="q"}`, `rbridge_quic_completions_received_total{leg="q"}`
		if !g.sent {
			ops, comps = `rbridge_quic_ops_received_total{leg="q"}`, `rbridge_quic_completions_sent_total{leg="q"}`
		}
		if m[ops] < 10 || m[comps] < 10 || m[comps] > m[ops] || m[`rbridge_quic_peer_connections{leg="q"}`] != 1 {
			t.Errorf("gateway %s: %s %v, %s %v, peer connections %v; want at least 10, at least 10 and no more than the ops, and 1", g.name, ops, m[ops], comps, m[comps], m[`rbridge_quic_peer_connections{leg="q"}`])
		}
	}

	// A target address no route of gateway B listens for: the client is
	// rejected with invalid service ID, as a CM with no listener would.
	_, err = client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7472")), cm.DialOptions{QP: client.qp(t)})
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) {
		t.Errorf("dial a target B has no route for: %v, want a reject with invalid service ID", err)
	}
}

// sessionOps SENDs and WRITE_WITH_IMMs payload from the client (the
// target's QP has a receive posted for the SEND and one for the
// immediate); both complete at both ends and land.
func sessionOps(t *testing.T, ctx context.Context, client, target *cmApp, cqp *transport.QP) {
	t.Helper()
	clear(target.mem[:len(payload)])
	clear(target.mem[8192 : 8192+len(payload)])
	copy(client.mem, payload)
	if err := cqp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Length: len(payload)}, Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpWriteWithImm, Imm: 5, Local: transport.SGE{MR: client.mr, Length: len(payload)}, Remote: target.mr.Addr() + 8192, RKey: target.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]transport.WC, 2)
	for _, cq := range []*transport.CQ{client.cq, target.cq} {
		for got := 0; got < 2; {
			k, err := cq.PollWait(ctx, wcs[:2-got])
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != transport.StatusSuccess {
					t.Fatalf("completion %+v: %v", wc, wc.Status)
				}
			}
			got += k
		}
	}
	if string(target.mem[:len(payload)]) != payload || string(target.mem[8192:8192+len(payload)]) != payload {
		t.Fatalf("the target holds %q and %q", target.mem[:len(payload)], target.mem[8192:8192+len(payload)])
	}
}

// TestGatewayQUICRefusesUntrustedPeer: a peer gateway whose certificate
// another CA signed never connects, whichever side distrusts the other,
// so a client of the route is rejected and nothing crosses; the refusal
// is counted (and logged) where it happened.
func TestGatewayQUICRefusesUntrustedPeer(t *testing.T) {
	filesA, caA := tunnelFiles(t, "gw-a")
	filesB, caB := tunnelFiles(t, "gw-b")
	// A bundle of both CAs: the side given it trusts the other.
	both := filepath.Join(t.TempDir(), "both.crt")
	var bundle []byte
	for _, f := range []string{caA, caB} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	if err := os.WriteFile(both, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		aCA, bCA string
		aRefuses bool // the dialing gateway refuses the listener's certificate
		bRefuses bool
	}{
		{"the dialer distrusts", caA, both, true, false},
		{"the listener distrusts", both, caB, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			if _, err := target.cm.Listen(7471, 8); err != nil {
				t.Fatal(err)
			}
			ga, gb := quicGateways(t, filesA["gw-a"], filesB["gw-b"], tc.aCA, tc.bCA)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
			var rej *cm.RejectError
			if !errors.As(err, &rej) {
				t.Fatalf("dial through an untrusted tunnel: %v, want a reject", err)
			}
			// A dialer's TLS 1.3 handshake is done before the listener has
			// checked its certificate: the connection the listener refuses
			// lives a round trip at A, then goes.
			var sa, sb leg.Status
			waitUntil(t, "no connection between gateways that must not trust each other", func() bool {
				sa, sb = ga.Status().Legs[1], gb.Status().Legs[0]
				return *sa.PeerConns == 0 && *sb.PeerConns == 0
			})
			if sa.Up || sb.Up || sa.State != "no peer connection" {
				t.Errorf("quic legs without a tunnel: A %q up %v, B %q up %v", sa.State, sa.Up, sb.State, sb.Up)
			}
			if (sa.PeerRefused > 0) != tc.aRefuses || (sb.PeerRefused > 0) != tc.bRefuses {
				t.Errorf("certificates refused: gateway A %d, gateway B %d; want A %v, B %v", sa.PeerRefused, sb.PeerRefused, tc.aRefuses, tc.bRefuses)
			}
			if sa.PeerWhy == "" {
				t.Error("gateway A's quic leg is down and its status does not say why")
			}
			// A backs off whichever side refuses: over two seconds a few
			// attempts (100 ms doubling, with jitter), not one every few
			// milliseconds.
			before := sa.PeerRefused + sb.PeerRefused
			time.Sleep(2 * time.Second)
			sa, sb = ga.Status().Legs[1], gb.Status().Legs[0]
			if n := sa.PeerRefused + sb.PeerRefused - before; n > 6 {
				t.Errorf("%d refused attempts in 2 s: gateway A does not back off", n)
			}
			if *sa.PeerConns != 0 {
				t.Errorf("gateway A counts %d peer connections to a peer that refuses it", *sa.PeerConns)
			}
		})
	}
}

// TestGatewayFallsBackThroughAPeer: a route whose target does not answer
// connects new clients through its fallback (a peer gateway over the quic
// leg), counted and shown; once the target answers, new sessions go to
// it again, while the session on the fallback runs on undisturbed.
func TestGatewayFallsBackThroughAPeer(t *testing.T) {
	files, caFile := tunnelFiles(t, "gw-a", "gw-b")
	client, far := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	farLn, err := far.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	// The route's own timers, not the gateway's (which would outlast the
	// test), decide when it falls back and when it tries again.
	opts := bridge.GatewayOptions{FallbackAfter: 20 * time.Second, FallbackRetry: time.Hour}
	ga := startGatewayWith(t, parseConfig(t, `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
  - {name: q, kind: quic, ip: 127.0.10.5, peer: "127.0.10.6:7400", cert: `+files["gw-a"][0]+`, key: `+files["gw-a"][1]+`, ca: `+caFile+`}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.9:7471"}
    fallback: {leg: q, addr: "127.0.10.4:7471", after: 300ms, retry: 500ms}
`), opts)
	startGateway(t, parseConfig(t, `legs:
  - {name: q, kind: quic, ip: 127.0.10.6, listen: "127.0.10.6:7400", cert: `+files["gw-b"][0]+`, key: `+files["gw-b"][1]+`, ca: `+caFile+`}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.7, io: udp}
routes:
  - {name: in, listen: {leg: q, addr: "127.0.10.4:7471"}, target: {leg: b, addr: "127.0.10.4:7471"}}
`))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The target at .9 does not exist: the client gets through the peer.
	_, tc, cqp := dialThrough(t, ctx, client, far, farLn, "1:7471")
	sessionOps(t, ctx, client, far, cqp)
	// A session enters the gateway's table once it started, which its
	// first operations may outrun.
	waitUntil(t, "the session in the gateway's table", func() bool { return ga.Sessions() == 1 })
	st := ga.Status()
	fb := st.Routes[0].Fallback
	if fb == nil || !fb.Active || !strings.Contains(fb.Why, "127.0.10.9:7471") && !strings.Contains(fb.Why, lo("9:7471")) {
		t.Fatalf("route status %+v: want its fallback active, naming the target that did not answer", st.Routes[0])
	}
	if len(st.Sessions) != 1 || !st.Sessions[0].Fallback || st.Sessions[0].Target != lo("4:7471") {
		t.Errorf("sessions %+v: want one through the fallback to %s", st.Sessions, lo("4:7471"))
	}
	// A second client while the target is still away: the fallback again,
	// one switch counted.
	_, _, cqp2 := dialThrough(t, ctx, client, far, farLn, "1:7471")
	sessionOps(t, ctx, client, far, cqp2)
	if s := ga.Stats().Snapshot(); s.Fallbacks != 1 || s.FellBack != 2 {
		t.Errorf("fallbacks %d, sessions through the fallback %d; want 1 and 2", s.Fallbacks, s.FellBack)
	}

	// The target comes back: after the retry interval a new client
	// connects to it, and the route says it is off the fallback.
	near := newCMApp(t, lo("9"))
	nearLn, err := near.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	cc3, _, cqp3 := dialThrough(t, ctx, client, near, nearLn, "1:7471")
	sessionOps(t, ctx, client, near, cqp3)
	waitUntil(t, "the third session in the gateway's table", func() bool { return ga.Sessions() == 3 })
	st = ga.Status()
	if fb := st.Routes[0].Fallback; fb == nil || fb.Active {
		t.Errorf("route status %+v: want its fallback inactive once the target answered", st.Routes[0])
	}
	onTarget := 0
	for _, s := range st.Sessions {
		if !s.Fallback && s.Target == lo("9:7471") {
			onTarget++
		}
	}
	if len(st.Sessions) != 3 || onTarget != 1 {
		t.Errorf("sessions %+v: want three, one on the route's own target", st.Sessions)
	}
	// The sessions on the fallback were not moved: they still work.
	if err := tc.QP().PostRecv(transport.RecvWR{ID: 3, Local: transport.SGE{MR: far.mr, Offset: 0, Length: 4096}},
		transport.RecvWR{ID: 4, Local: transport.SGE{MR: far.mr, Offset: 4096, Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	sessionOps(t, ctx, client, far, cqp)
	if s := ga.Stats().Snapshot(); s.Fallbacks != 1 || s.FellBack != 2 {
		t.Errorf("after the target came back: fallbacks %d, through the fallback %d; want 1 and 2", s.Fallbacks, s.FellBack)
	}
	// The session to the target that came last ends before that target
	// does (its CM would not answer the gateway's DREQ after the test).
	if err := cc3.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the session on the route's own target ended", func() bool { return ga.Sessions() == 2 })
}

// TestGatewayQUICOverIPoIBNeedsTheInterface: a quic leg over a verbs leg
// runs on that leg's port's IPoIB interface; without one (this machine
// has no RDMA device, let alone IPoIB) the gateway does not start, and
// says why.
func TestGatewayQUICOverIPoIBNeedsTheInterface(t *testing.T) {
	files, caFile := tunnelFiles(t, "gw-a")
	cfg := parseConfig(t, `legs:
  - {name: q, kind: quic, ip: 127.0.10.5, peer: "127.0.10.6:7400", over: ib, cert: `+files["gw-a"][0]+`, key: `+files["gw-a"][1]+`, ca: `+caFile+`}
  - {name: ib, kind: verbs, ip: 127.0.10.5}
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
routes:
  - {name: out, listen: {leg: a, addr: "127.0.10.1:7471"}, target: {leg: q, addr: "127.0.10.4:7471"}}
`)
	_, err := bridge.StartGateway(bridge.GatewayOptions{Config: cfg, Pool: pool.Options{Size: 4 << 20}})
	if err == nil || !strings.Contains(err.Error(), `leg "q": over "ib"`) {
		t.Fatalf("start a gateway whose quic leg runs over a verbs leg with no device: %v, want the leg and its over named", err)
	}
	if err := bridge.CheckLegs(cfg); err == nil || !strings.Contains(err.Error(), `over "ib"`) {
		t.Errorf("CheckLegs: %v, want the quic leg's over named", err)
	}
}
