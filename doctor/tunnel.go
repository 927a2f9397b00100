package doctor

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/tunnel"
)

// certWarnAhead is how long before its certificate expires a quic leg is
// warned about: time to issue and roll out a new one.
const certWarnAhead = 30 * 24 * time.Hour

// checkTunnels checks each quic leg's mutual TLS as a peer gateway will:
// the files load, the certificate is valid now and not about to expire,
// it may be used the ways the leg uses it (serverAuth to accept,
// clientAuth to dial), and a peer dialing the leg's listen address by IP
// finds that IP in it.
func (h *host) checkTunnels() {
	if h.o.Config == nil {
		return
	}
	for i := range h.o.Config.Legs {
		l := &h.o.Config.Legs[i]
		if l.Kind != config.KindQUIC {
			continue
		}
		subject := "leg " + l.Name
		if _, err := tunnel.LoadCredentials(l.Cert, l.Key, l.CA, l.PeerName); err != nil {
			h.finding("tunnel", subject, l, Error, err.Error(), "give the leg a PEM certificate, its key and the CA that signed the peer's (cert, key, ca)")
			continue
		}
		leaf, err := readLeaf(l.Cert)
		if err != nil {
			h.finding("tunnel", subject, l, Error, err.Error(), "")
			continue
		}
		now := time.Now()
		switch left := leaf.NotAfter.Sub(now); {
		case now.Before(leaf.NotBefore):
			h.finding("tunnel", subject, l, Error, fmt.Sprintf("certificate %s is not valid before %s", l.Cert, leaf.NotBefore.UTC().Format(time.RFC3339)),
				"check the host's clock, or issue a certificate valid now")
		case left <= 0:
			h.finding("tunnel", subject, l, Error, fmt.Sprintf("certificate %s expired at %s: the peer gateway refuses it", l.Cert, leaf.NotAfter.UTC().Format(time.RFC3339)),
				"issue a new certificate from the CA and reload")
		case left < certWarnAhead:
			in := fmt.Sprintf("%d days", int(left.Hours()/24))
			if left < 48*time.Hour {
				in = fmt.Sprintf("%d hours", int(left.Hours()))
			}
			h.finding("tunnel", subject, l, Warn, fmt.Sprintf("certificate %s expires in %s (%s)", l.Cert, in, leaf.NotAfter.UTC().Format(time.RFC3339)),
				"issue a new certificate from the CA before then")
		default:
			h.finding("tunnel", subject, l, OK, fmt.Sprintf("certificate %s valid until %s", l.Cert, leaf.NotAfter.UTC().Format(time.RFC3339)), "")
		}
		for _, u := range []struct {
			need bool
			eku  x509.ExtKeyUsage
			name string
			why  string
		}{{l.ListenAddr().IsValid(), x509.ExtKeyUsageServerAuth, "serverAuth", "the leg accepts its peer (listen)"},
			{l.PeerAddr().IsValid(), x509.ExtKeyUsageClientAuth, "clientAuth", "the leg dials its peer (peer)"}} {
			if u.need && len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, u.eku) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
				h.finding("tunnel", subject, l, Error, fmt.Sprintf("certificate %s lacks the %s usage, and %s: the peer refuses it", l.Cert, u.name, u.why),
					"issue the certificate with extendedKeyUsage serverAuth, clientAuth")
			}
		}
		if ap := l.ListenAddr(); ap.IsValid() && leaf.VerifyHostname(ap.Addr().String()) != nil {
			h.finding("tunnel", subject, l, Warn, fmt.Sprintf("certificate %s does not name %v: a peer that dials it without peer_name refuses it (its names: %v)", l.Cert, ap.Addr(), leaf.DNSNames),
				"add the IP as a subjectAltName, or set the peer's peer_name to one of the certificate's names")
		}
	}
}

// readLeaf parses the first certificate of a PEM file.
func readLeaf(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	for len(b) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate %s: %w", file, err)
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("certificate %s: no PEM certificate in it", file)
}
