package tunnel

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quic-go/quic-go"
)

// ALPN names the tunnel's protocol and version in the TLS handshake.
const ALPN = "rbridge-tunnel/1"

// Credentials are a gateway's certificate and the CA its peers' must be
// signed by: mutual TLS, both ways.
type Credentials struct {
	cert tls.Certificate
	ca   *x509.CertPool
	// peerName, when set, must be a name (DNS SAN) of the peer's
	// certificate, as well as its being signed by the CA.
	peerName string
	// OnRefused, when set, is told of every peer certificate refused
	// (an unknown CA, expired, the wrong name): the handshake fails, and
	// the gateway logs and counts why.
	OnRefused func(error)
}

// LoadCredentials reads a PEM certificate (chain) with its key and a PEM
// CA bundle. peerName, when not empty, is the name the peer's certificate
// must carry.
func LoadCredentials(certFile, keyFile, caFile, peerName string) (*Credentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tunnel: certificate %s with key %s: %w", certFile, keyFile, err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tunnel: CA: %w", err)
	}
	c, err := NewCredentials(cert, ca, peerName)
	if err != nil {
		return nil, fmt.Errorf("tunnel: CA %s: %w", caFile, err)
	}
	return c, nil
}

// NewCredentials makes Credentials from a certificate and a PEM CA bundle.
func NewCredentials(cert tls.Certificate, caPEM []byte, peerName string) (*Credentials, error) {
	if len(cert.Certificate) == 0 {
		return nil, errors.New("tunnel: credentials: no certificate")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("tunnel: credentials: no PEM certificate in the CA bundle")
	}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		cert.Leaf = leaf
	}
	return &Credentials{cert: cert, ca: pool, peerName: peerName}, nil
}

// Expires returns when the gateway's own certificate expires.
func (c *Credentials) Expires() time.Time {
	if c.cert.Leaf == nil {
		return time.Time{}
	}
	return c.cert.Leaf.NotAfter
}

// verify checks the peer's certificate: its chain to the CA (valid now,
// for usage), and its name when one is configured. crypto/tls leaves the
// chain to it (InsecureSkipVerify on the client, RequireAnyClientCert on
// the server) so that every refusal passes through here and OnRefused.
func (c *Credentials) verify(cs tls.ConnectionState, usage x509.ExtKeyUsage, dnsName string) error {
	err := c.check(cs, usage, dnsName)
	if err != nil && c.OnRefused != nil {
		c.OnRefused(err)
	}
	return err
}

func (c *Credentials) check(cs tls.ConnectionState, usage x509.ExtKeyUsage, dnsName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tunnel: the peer sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, ic := range cs.PeerCertificates[1:] {
		inter.AddCert(ic)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: dnsName}); err != nil {
		return fmt.Errorf("tunnel: peer certificate %q refused: %w", leaf.Subject.String(), err)
	}
	if c.peerName != "" && c.peerName != dnsName {
		if err := leaf.VerifyHostname(c.peerName); err != nil {
			return fmt.Errorf("tunnel: peer certificate %q does not name %q: %w", leaf.Subject.String(), c.peerName, err)
		}
	}
	return nil
}

// ServerConfig is the TLS configuration of the gateway that accepts: it
// requires a client certificate signed by the CA.
func (c *Credentials) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAnyClientCert, // verified against the CA in verify
		NextProtos:   []string{ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return c.verify(cs, x509.ExtKeyUsageClientAuth, "")
		},
	}
}

// ClientConfig is the TLS configuration of the gateway that dials
// serverName (the peer's name, or its IP address when the certificate
// names that).
func (c *Credentials) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.cert},
		ServerName:         serverName,
		InsecureSkipVerify: true, // verified against the CA, for serverName, in verify
		NextProtos:         []string{ALPN},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return c.verify(cs, x509.ExtKeyUsageServerAuth, serverName)
		},
	}
}

// QUICConfig is the QUIC configuration of a tunnel: keep-alives so an idle
// tunnel stays up (and a dead peer is found within MaxIdleTimeout), room
// for many sessions (streams), and flow-control windows large enough for
// a link with a long delay (16 MiB per session at most, 64 MiB in all).
func QUICConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout:           5 * time.Second,
		MaxIdleTimeout:                 15 * time.Second,
		KeepAlivePeriod:                3 * time.Second,
		MaxIncomingStreams:             1 << 14,
		InitialStreamReceiveWindow:     1 << 20,
		MaxStreamReceiveWindow:         16 << 20,
		InitialConnectionReceiveWindow: 2 << 20,
		MaxConnectionReceiveWindow:     64 << 20,
	}
}
