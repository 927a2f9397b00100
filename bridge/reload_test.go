package bridge_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

func parseConfig(t *testing.T, y string) *config.Config {
	t.Helper()
	c, err := config.Parse("gw.yaml", []byte(strings.ReplaceAll(y, "127.0.10.", loNet)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const reloadLegs = `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
`

// sendThrough SENDs msg on cqp and waits for it at the target.
func sendThrough(t *testing.T, ctx context.Context, client, target *cmApp, cqp *transport.QP, msg string) {
	t.Helper()
	copy(client.mem, msg)
	if err := cqp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Length: len(msg)}, Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]transport.WC, 1)
	for _, cq := range []*transport.CQ{client.cq, target.cq} {
		if _, err := cq.PollWait(ctx, wcs); err != nil || wcs[0].Status != transport.StatusSuccess {
			t.Fatalf("SEND %q: %v %v", msg, err, wcs[0].Status)
		}
	}
}

// TestGatewayReload: a reload starts a route that is new, stops one that
// is gone (it refuses new clients) and leaves the unchanged one and its
// session alone; one whose legs differ is refused whole.
func TestGatewayReload(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: parseConfig(t, reloadLegs+`
  - {name: kept, listen: {leg: a, addr: "127.0.10.1:7481"}, target: {leg: b, addr: "127.0.10.4:7471"}}
  - {name: gone, listen: {leg: a, addr: "127.0.10.1:7482"}, target: {leg: b, addr: "127.0.10.4:7471"}}
`), Logger: testlog.New(t), ConnectTimeout: 2 * time.Second, Pool: pool.Options{Size: 8 << 20}})
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, _, cqp := dialThrough(t, ctx, client, target, ln, "1:7481")
	sendThrough(t, ctx, client, target, cqp, "before the reload")

	res, err := g.Reload(parseConfig(t, reloadLegs+`
  - {name: kept, listen: {leg: a, addr: "127.0.10.1:7481"}, target: {leg: b, addr: "127.0.10.4:7471"}}
  - {name: new, listen: {leg: a, addr: "127.0.10.1:7483"}, target: {leg: b, addr: "127.0.10.4:7471"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.String(), "added new; removed gone; unchanged kept"; got != want {
		t.Errorf("reload: %q, want %q", got, want)
	}
	// The unchanged route's session was not touched.
	sendThrough(t, ctx, client, target, cqp, "after the reload")
	if n := g.Sessions(); n != 1 {
		t.Errorf("%d sessions after the reload, want the one", n)
	}
	// The new route accepts; the removed one is gone.
	nc, _, _ := dialThrough(t, ctx, newCMApp(t, lo("5")), target, ln, "1:7483") // the added route accepts
	// The gateway counts a session once its client's RTU came and the
	// session started, which may be after the client saw its connection
	// established (it sent the RTU).
	waitUntil(t, "the added route's session", func() bool { return g.Sessions() == 2 })
	if _, err := newCMApp(t, lo("6")).cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7482")), cm.DialOptions{QP: client.qp(t)}); !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) {
		t.Errorf("dial the removed route: %v, want a reject (nothing listens)", err)
	}
	// Legs are opened once: a reload that changes them is refused whole.
	_, err = g.Reload(parseConfig(t, strings.Replace(reloadLegs, "io: udp}\n  - {name: b", "io: udp}\n  - {name: c, kind: userspace, interface: lo, ip: 127.0.10.9, io: udp}\n  - {name: b", 1)+`
  - {name: kept, listen: {leg: a, addr: "127.0.10.1:7481"}, target: {leg: b, addr: "127.0.10.4:7471"}}
`))
	if !errors.Is(err, bridge.ErrLegsChanged) || !strings.Contains(err.Error(), `leg "c" added`) {
		t.Errorf("reload with a leg added: %v, want ErrLegsChanged naming it", err)
	}
	// So is one that sizes the pool otherwise: it is registered as the
	// legs open.
	_, err = g.Reload(parseConfig(t, reloadLegs+`
  - {name: kept, listen: {leg: a, addr: "127.0.10.1:7481"}, target: {leg: b, addr: "127.0.10.4:7471"}}
pool: {size: 32MiB}
`))
	if !errors.Is(err, bridge.ErrLegsChanged) || !strings.Contains(err.Error(), "pool: size differs") {
		t.Errorf("reload with the pool sized: %v, want ErrLegsChanged naming the pool", err)
	}
	if n := g.Sessions(); n != 2 {
		t.Errorf("%d sessions after the refused reloads, want 2", n)
	}
	_ = cc.Disconnect(ctx)
	_ = nc.Disconnect(ctx)
}

// TestGatewayPoolSize: the file's pool.size sizes the gateway's pool,
// shared by its size classes; a reload with the same size is taken.
func TestGatewayPoolSize(t *testing.T) {
	const r = `
  - {name: r, listen: {leg: a, addr: "127.0.10.1:7485"}, target: {leg: b, addr: "127.0.10.4:7471"}}
pool: {size: 24MiB}
`
	g := startGateway(t, parseConfig(t, reloadLegs+r))
	total := 0
	for _, c := range g.Pool().Stats() {
		total += c.Total * c.Size
	}
	if share := 24 << 20 / len(bridge.DefaultPoolClasses); total > 24<<20 || total < 24<<20-len(bridge.DefaultPoolClasses)*share/64 {
		t.Errorf("the pool's classes hold %d bytes, want 24 MiB but for alignment", total)
	}
	if _, err := g.Reload(parseConfig(t, reloadLegs+r)); err != nil {
		t.Errorf("reload with the same pool size: %v", err)
	}
}

// TestGatewayReloadProtocol: a route whose protocol a reload adds,
// changes or removes is a changed route (restarted); one reloaded as it
// was is unchanged; /status names the protocol in force, and the
// protocol's counters stay on /metrics. A gateway started without a
// protocol route has no staging buffers: a reload that adds one is
// refused, and says to restart.
func TestGatewayReloadProtocol(t *testing.T) {
	const r = `
  - {name: r, listen: {leg: a, addr: "127.0.10.1:7484"}, target: {leg: b, addr: "127.0.10.4:7471"}`
	plain := startGateway(t, parseConfig(t, reloadLegs+r+"}\n"))
	if _, err := plain.Reload(parseConfig(t, reloadLegs+r+", protocol: nvme}\n")); err == nil || !strings.Contains(err.Error(), "no staging buffers") || !strings.Contains(err.Error(), "restart rbridge") {
		t.Errorf("a reload that adds a protocol to a gateway without staging buffers: %v, want it refused, saying to restart", err)
	}
	plain.Close(context.Background())
	g := startGateway(t, parseConfig(t, reloadLegs+r+", protocol: nvme}\n"))
	base := startAdmin(t, g)
	for _, step := range []struct{ protocol, want string }{
		{"", "changed r"},
		{"nvme", "changed r"},
		{"nvme", "unchanged r"},
		{"", "changed r"},
	} {
		y := reloadLegs + r + "}\n"
		if step.protocol != "" {
			y = reloadLegs + r + ", protocol: " + step.protocol + "}\n"
		}
		res, err := g.Reload(parseConfig(t, y))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.String(); got != step.want {
			t.Errorf("reload to protocol %q: %q, want %q", step.protocol, got, step.want)
		}
		if st := g.Status(); len(st.Routes) != 1 || st.Routes[0].Protocol != step.protocol {
			t.Errorf("after the reload to protocol %q, /status routes: %+v", step.protocol, st.Routes)
		}
	}
	m, b := scrape(t, base)
	promtool(t, b)
	if _, ok := m[`rbridge_route_protocol_completions_total{protocol="nvme",route="r"}`]; !ok {
		t.Error("the route's nvme counters left /metrics when its protocol was removed")
	}
}
