package tunnel_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rbridge/rbridge/internal/testcert"
	"github.com/rbridge/rbridge/tunnel"
)

// refusals records what OnRefused was told.
type refusals struct {
	mu   sync.Mutex
	errs []string
}

func (r *refusals) add(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err.Error())
	r.mu.Unlock()
}

func (r *refusals) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "; ")
}

// handshake runs a QUIC handshake between a client and a server with
// these credentials on loopback; it returns the client's error and what
// each side refused.
func handshake(t *testing.T, client, server *tunnel.Credentials, serverName string) (error, *refusals, *refusals) {
	t.Helper()
	var cr, sr refusals
	client.OnRefused, server.OnRefused = cr.add, sr.add
	ln, err := quic.ListenAddr("127.0.0.1:0", server.ServerConfig(), tunnel.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err == nil {
			// The server's side of the handshake ends once the client's
			// certificate was checked.
			// The client closes once it saw the handshake through.
			<-c.Context().Done()
		}
		accepted <- err
	}()
	c, err := quic.DialAddr(ctx, ln.Addr().String(), client.ClientConfig(serverName), tunnel.QUICConfig())
	if err == nil {
		// The client learns of a refusal of its own certificate when the
		// server closes the connection, a round trip after the handshake.
		select {
		case <-c.Context().Done():
			err = context.Cause(c.Context())
		case <-time.After(200 * time.Millisecond):
		}
		c.CloseWithError(0, "")
	}
	cancel()
	<-accepted
	return err, &cr, &sr
}

func creds(t *testing.T, ca *testcert.CA, o testcert.Options, trust []byte, peerName string) *tunnel.Credentials {
	t.Helper()
	leaf, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tunnel.NewCredentials(leaf.TLS, trust, peerName)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMutualTLS(t *testing.T) {
	ca, err := testcert.NewCA("rbridge CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcert.NewCA("someone else's CA")
	if err != nil {
		t.Fatal(err)
	}
	ip := testcert.Options{IPs: []net.IP{net.ParseIP("127.0.0.1")}, DNS: []string{"gw-b"}}
	expired := ip
	expired.NotBefore, expired.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	for _, tc := range []struct {
		name           string
		client, server func() *tunnel.Credentials
		serverName     string
		// What must be refused, by whom ("" for a handshake that works).
		clientRefuses, serverRefuses string
	}{
		{"trusted", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") }, "127.0.0.1", "", ""},
		{"trusted by name", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "gw-b") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") }, "gw-b", "", ""},
		{"client from another CA", func() *tunnel.Credentials { return creds(t, other, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") }, "127.0.0.1", "", "unknown authority"},
		{"server from another CA", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, other, ip, ca.PEM, "") }, "127.0.0.1", "unknown authority", ""},
		{"client expired", func() *tunnel.Credentials { return creds(t, ca, expired, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") }, "127.0.0.1", "", "expired"},
		{"server expired", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, expired, ca.PEM, "") }, "127.0.0.1", "expired", ""},
		{"server lacks the name", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") }, "gw-c", "gw-c", ""},
		{"client lacks peer_name", func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "") },
			func() *tunnel.Credentials { return creds(t, ca, ip, ca.PEM, "gw-a") }, "127.0.0.1", "", "does not name \"gw-a\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, cr, sr := handshake(t, tc.client(), tc.server(), tc.serverName)
			if tc.clientRefuses == "" && tc.serverRefuses == "" {
				if err != nil || cr.all() != "" || sr.all() != "" {
					t.Fatalf("handshake: %v (client refused %q, server refused %q)", err, cr.all(), sr.all())
				}
				return
			}
			if err == nil {
				t.Errorf("the handshake succeeded")
			}
			for _, c := range []struct {
				who, want string
				r         *refusals
			}{{"client", tc.clientRefuses, cr}, {"server", tc.serverRefuses, sr}} {
				if c.want == "" && c.r.all() != "" || !strings.Contains(c.r.all(), c.want) {
					t.Errorf("the %s refused %q, want %q", c.who, c.r.all(), c.want)
				}
			}
		})
	}
}

func TestCredentialsBad(t *testing.T) {
	ca, err := testcert.NewCA("rbridge CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testcert.Options{DNS: []string{"gw"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tunnel.NewCredentials(tls.Certificate{}, ca.PEM, ""); err == nil {
		t.Error("credentials without a certificate")
	}
	if _, err := tunnel.NewCredentials(leaf.TLS, []byte("not PEM"), ""); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA bundle without a certificate: %v", err)
	}
	dir := t.TempDir()
	cert, key, caFile, err := ca.Files(dir, "gw", leaf)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tunnel.LoadCredentials(cert, key, caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Expires().Before(time.Now()) {
		t.Errorf("expires %v", c.Expires())
	}
	if _, err := tunnel.LoadCredentials(cert, caFile, caFile, ""); err == nil || !strings.Contains(err.Error(), cert) {
		t.Errorf("a key file that holds a certificate: %v", err)
	}
	if _, err := tunnel.LoadCredentials(cert, key, dir+"/nope.crt", ""); err == nil || !strings.Contains(err.Error(), "nope.crt") {
		t.Errorf("a missing CA file: %v", err)
	}
}
