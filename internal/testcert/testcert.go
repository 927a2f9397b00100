// Package testcert makes throwaway certificate authorities and
// certificates for rbridge's mutual TLS (the gateway-to-gateway tunnel):
// for tests, and for rbridge demo --tunnel's one-process gateways. ECDSA
// P-256 keys, PEM files, names and validity chosen by the caller. A real
// deployment's certificates come from its own CA (README).
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// A CA signs certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate.
	PEM []byte
}

// NewCA makes a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Leaf is a certificate with its key.
type Leaf struct {
	TLS             tls.Certificate
	CertPEM, KeyPEM []byte
}

// Options say what a leaf certificate names and how long it is valid.
type Options struct {
	DNS       []string
	IPs       []net.IP
	NotBefore time.Time // default: an hour ago
	NotAfter  time.Time // default: in a day
	// Usages are the extended key usages (default serverAuth and
	// clientAuth, what a gateway that both dials and accepts needs).
	Usages []x509.ExtKeyUsage
}

var serial = big.NewInt(100)

// Issue signs a certificate for client and server authentication.
func (ca *CA) Issue(o Options) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if o.Usages == nil {
		o.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	serial = new(big.Int).Add(serial, big.NewInt(1))
	cn := "rbridge"
	if len(o.DNS) > 0 {
		cn = o.DNS[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     o.DNS,
		IPAddresses:  o.IPs,
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  o.Usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	l := &Leaf{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		return nil, err
	}
	return l, nil
}

// Files writes the leaf's certificate and key and the CA's certificate
// into dir as NAME.crt, NAME.key and ca.crt, and returns their paths.
func (ca *CA) Files(dir, name string, l *Leaf) (cert, key, caFile string, err error) {
	cert, key, caFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, "ca.crt")
	for _, f := range []struct {
		path string
		b    []byte
	}{{cert, l.CertPEM}, {key, l.KeyPEM}, {caFile, ca.PEM}} {
		if err := os.WriteFile(f.path, f.b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("testcert: %w", err)
		}
	}
	return cert, key, caFile, nil
}
