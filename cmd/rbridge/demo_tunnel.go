package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/quic-go/quic-go"

	"github.com/rbridge/rbridge/internal/testcert"
	"github.com/rbridge/rbridge/tunnel"
)

// demoTunnel is what demo --tunnel puts between its two gateways: a QUIC
// connection on loopback with mutual TLS from a throwaway CA, and one
// session's stream on it, opened as a quic leg opens one.
type demoTunnel struct {
	ln   *quic.Listener
	dial *quic.Transport // gateway A's socket, on --addr as every other
	conn *quic.Conn
	srv  *quic.Conn
	a, b *leg.QUICEndpoint
}

func (t *demoTunnel) close() {
	for _, e := range []*leg.QUICEndpoint{t.a, t.b} {
		if e != nil {
			e.Close()
		}
	}
	for _, c := range []*quic.Conn{t.conn, t.srv} {
		if c != nil {
			c.CloseWithError(0, "demo ends")
		}
	}
	if t.ln != nil {
		t.ln.Close()
	}
	if t.dial != nil {
		t.dial.Close()
		t.dial.Conn.Close()
	}
}

func newDemoTunnel(ctx context.Context, addr netip.Addr, pl *pool.Pool, log *slog.Logger) (*demoTunnel, error) {
	ca, err := testcert.NewCA("rbridge demo CA")
	if err != nil {
		return nil, err
	}
	var creds [2]*tunnel.Credentials
	for i, name := range []string{"gateway-a", "gateway-b"} {
		leaf, err := ca.Issue(testcert.Options{DNS: []string{name}, IPs: []net.IP{net.IP(addr.AsSlice())}})
		if err != nil {
			return nil, err
		}
		if creds[i], err = tunnel.NewCredentials(leaf.TLS, ca.PEM, ""); err != nil {
			return nil, err
		}
	}
	t := &demoTunnel{}
	fail := func(err error) (*demoTunnel, error) {
		t.close()
		return nil, err
	}
	if t.ln, err = quic.ListenAddr(netip.AddrPortFrom(addr, 0).String(), creds[1].ServerConfig(), tunnel.QUICConfig()); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		return fail(fmt.Errorf("gateway A's QUIC socket: %w", err))
	}
	t.dial = &quic.Transport{Conn: udp}
	if t.conn, err = t.dial.Dial(ctx, t.ln.Addr(), creds[0].ClientConfig("gateway-b"), tunnel.QUICConfig()); err != nil {
		return fail(fmt.Errorf("connect gateway A to gateway B: %w", err))
	}
	sa, err := t.conn.OpenStreamSync(ctx)
	if err != nil {
		return fail(err)
	}
	open := tunnel.OpenFields{Target: netip.AddrPortFrom(addr, 1), MaxOps: 256}
	b, err := open.Append(nil)
	if err == nil {
		_, err = sa.Write(b)
	}
	if err != nil {
		return fail(fmt.Errorf("open the session: %w", err))
	}
	if t.srv, err = t.ln.Accept(ctx); err != nil {
		return fail(err)
	}
	sb, err := t.srv.AcceptStream(ctx)
	if err != nil {
		return fail(err)
	}
	if _, _, err := tunnel.ReadMessage(sb, tunnel.TypeOpen); err != nil {
		return fail(fmt.Errorf("gateway B: the session's Open: %w", err))
	}
	acc := tunnel.AcceptFields{MaxOps: 256}
	if b, err = acc.Append(nil); err == nil {
		_, err = sb.Write(b)
	}
	if err != nil {
		return fail(fmt.Errorf("accept the session: %w", err))
	}
	if _, _, err := tunnel.ReadMessage(sa, tunnel.TypeAccept); err != nil {
		return fail(fmt.Errorf("gateway A: the session's Accept: %w", err))
	}
	if t.a, err = leg.NewQUICEndpoint(leg.QUICOptions{Stream: sa, Window: 256, Pool: pl, Logger: log, Name: "gateway A's tunnel"}); err != nil {
		return fail(err)
	}
	if t.b, err = leg.NewQUICEndpoint(leg.QUICOptions{Stream: sb, Window: 256, Pool: pl, Logger: log, Name: "gateway B's tunnel"}); err != nil {
		return fail(err)
	}
	return t, nil
}
