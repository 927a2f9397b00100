// Package legtest is the legs' test double side: a pair of QUIC
// endpoints on loopback, one session's stream between two gateways, for
// the tests of the quic endpoint, the session and the gateway.
package legtest

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/internal/testcert"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/tunnel"
)

// Creds are two gateways' credentials from one CA.
func Creds(t testing.TB) (a, b *tunnel.Credentials) {
	t.Helper()
	ca, err := testcert.NewCA("rbridge test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []**tunnel.Credentials{&a, &b} {
		leaf, err := ca.Issue(testcert.Options{DNS: []string{"gw"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		if *dst, err = tunnel.NewCredentials(leaf.TLS, ca.PEM, ""); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// QUICPair is one session's stream between two QUIC endpoints on
// loopback, the Open and Accept done as two gateways' quic legs do; stop
// closes the QUIC connection and listener (also at the test's end).
func QUICPair(t testing.TB, pl *pool.Pool) (a, b *leg.QUICEndpoint, stop func()) {
	t.Helper()
	sa, sb, stop := QUICStreams(t)
	var err error
	if a, err = leg.NewQUICEndpoint(leg.QUICOptions{Stream: sa, Window: 48, Pool: pl, Logger: testlog.New(t), Name: "tunnel a"}); err != nil {
		t.Fatal(err)
	}
	if b, err = leg.NewQUICEndpoint(leg.QUICOptions{Stream: sb, Window: 64, Pool: pl, Logger: testlog.New(t), Name: "tunnel b"}); err != nil {
		t.Fatal(err)
	}
	return a, b, stop
}

// QUICStreams are QUICPair's two streams, the Open (MaxOps 64) and
// the Accept (MaxOps 48) read and written, before any endpoint takes them.
func QUICStreams(t testing.TB) (sa, sb *quic.Stream, stop func()) {
	t.Helper()
	ca, cb := Creds(t)
	ln, err := quic.ListenAddr("127.0.0.1:0", cb.ServerConfig(), tunnel.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca2 := ca.ClientConfig("gw")
	conn, err := quic.DialAddr(ctx, ln.Addr().String(), ca2, tunnel.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop = func() {
		conn.CloseWithError(0, "")
		ln.Close()
	}
	t.Cleanup(stop)
	sa, err = conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	open := tunnel.OpenFields{Target: netip.MustParseAddrPort("127.0.0.9:1"), MaxOps: 64}
	buf, err := open.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Write(buf); err != nil {
		t.Fatal(err)
	}
	sc, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err = sc.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, tunnel.HeaderLen+tunnel.MaxFixedLen)
	if typ, _, _, err := tunnel.ReadFrame(sb, hdr); err != nil || typ != tunnel.TypeOpen {
		t.Fatalf("Open: %v %v", typ, err)
	}
	acc := tunnel.AcceptFields{MaxOps: 48}
	if buf, err = acc.Append(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Write(buf); err != nil {
		t.Fatal(err)
	}
	if typ, _, _, err := tunnel.ReadFrame(sa, hdr); err != nil || typ != tunnel.TypeAccept {
		t.Fatalf("Accept: %v %v", typ, err)
	}
	return sa, sb, stop
}
