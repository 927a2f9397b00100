package doctor_test

import (
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/doctor"
	"github.com/rbridge/rbridge/internal/testcert"
)

// TestTunnelCertificates: a quic leg's certificate as its peer will see
// it: valid, about to expire, expired, without the usage the leg needs,
// without the IP a peer dials.
func TestTunnelCertificates(t *testing.T) {
	ca, err := testcert.NewCA("rbridge CA")
	if err != nil {
		t.Fatal(err)
	}
	ip := []net.IP{net.ParseIP("10.0.0.1")}
	year := time.Now().Add(365 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		o    testcert.Options
		leg  string // the leg's addresses
		want doctor.Severity
		msg  string
	}{
		{"valid", testcert.Options{IPs: ip, NotAfter: year}, `listen: "10.0.0.1:7471"`, doctor.OK, "valid until"},
		{"expiring", testcert.Options{IPs: ip, NotAfter: time.Now().Add(10 * 24 * time.Hour)}, `listen: "10.0.0.1:7471"`, doctor.Warn, "expires in 9 days"},
		{"expired", testcert.Options{IPs: ip, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}, `listen: "10.0.0.1:7471"`, doctor.Error, "expired at"},
		{"not yet valid", testcert.Options{IPs: ip, NotBefore: time.Now().Add(time.Hour)}, `listen: "10.0.0.1:7471"`, doctor.Error, "is not valid before"},
		{"no ip for the listen address", testcert.Options{DNS: []string{"gw-a"}, NotAfter: year}, `listen: "10.0.0.1:7471"`, doctor.Warn, "does not name 10.0.0.1"},
		{"expiring today", testcert.Options{IPs: ip, NotAfter: time.Now().Add(5 * time.Hour)}, `listen: "10.0.0.1:7471"`, doctor.Warn, "expires in 4 hours"},
		{"a server certificate on a leg that dials", testcert.Options{IPs: ip, NotAfter: year, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, `peer: "10.0.0.2:7471"`, doctor.Error, "lacks the clientAuth usage"},
		{"dials only", testcert.Options{DNS: []string{"gw-a"}, NotAfter: year}, `peer: "10.0.0.2:7471"`, doctor.OK, "valid until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, err := ca.Issue(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			cert, key, caFile, err := ca.Files(t.TempDir(), "gw", leaf)
			if err != nil {
				t.Fatal(err)
			}
			cfg := fmt.Sprintf(`legs:
  - {name: q, kind: quic, ip: 10.0.0.1, %s, cert: %s, key: %s, ca: %s}
  - {name: roce, kind: userspace, interface: eth1, ip: 198.18.1.3}
routes:
  - {name: r, listen: {leg: roce, addr: "198.18.1.3:4420"}, target: {leg: q, addr: "198.18.9.2:4420"}}
`, tc.leg, cert, key, caFile)
			r := run(t, "good", cfg, doctor.Options{Interval: -1})
			fs := find(r, "tunnel", "leg q")
			worst := doctor.OK
			found := false
			for _, f := range fs {
				worst = max(worst, f.Severity)
				found = found || strings.Contains(f.Message, tc.msg)
			}
			if worst != tc.want || !found {
				t.Errorf("findings\n%s\nwant the worst %v, one saying %q", dump(fs), tc.want, tc.msg)
			}
		})
	}
	// Files that do not load.
	r := run(t, "good", `legs:
  - {name: q, kind: quic, ip: 10.0.0.1, peer: "10.0.0.2:7471", cert: /nonexistent.crt, key: /nonexistent.key, ca: /nonexistent.ca}
  - {name: roce, kind: userspace, interface: eth1, ip: 198.18.1.3}
routes:
  - {name: r, listen: {leg: roce, addr: "198.18.1.3:4420"}, target: {leg: q, addr: "198.18.9.2:4420"}}
`, doctor.Options{Interval: -1})
	if fs := find(r, "tunnel", "leg q"); len(fs) != 1 || fs[0].Severity != doctor.Error || !strings.Contains(fs[0].Message, "/nonexistent.crt") {
		t.Errorf("a leg whose certificate is missing: findings\n%s", dump(fs))
	}
}
