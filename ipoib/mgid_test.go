package ipoib_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ipoib"
)

// kernelBroadcast is ipv4_bcast_addr from drivers/infiniband/ulp/ipoib/
// ipoib_main.c, which ipoib_setup_common copies into every interface's
// broadcast address before ipoib_ndo_init writes the P_Key into bytes 8-9.
var kernelBroadcast = []byte{
	0x00, 0xff, 0xff, 0xff,
	0xff, 0x12, 0x40, 0x1b, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff,
}

func TestBroadcast(t *testing.T) {
	for _, tc := range []struct {
		pkey  ipoib.PKey
		scope ipoib.Scope
		want  string
	}{
		// The brd every capture shows (default partition, link-local).
		{ipoib.DefaultPKey, ipoib.ScopeLinkLocal, "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"},
		{0x8001, ipoib.ScopeLinkLocal, "00:ff:ff:ff:ff:12:40:1b:80:01:00:00:00:00:00:00:ff:ff:ff:ff"},
		{0xffff, ipoib.ScopeSiteLocal, "00:ff:ff:ff:ff:15:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"},
	} {
		a := ipoib.Broadcast(tc.pkey, tc.scope)
		if got := a.String(); got != tc.want {
			t.Errorf("Broadcast(%v, %v) = %s, want %s", tc.pkey, tc.scope, got, tc.want)
		}
		// The kernel's bytes, with the P_Key and scope written in.
		k := bytes.Clone(kernelBroadcast)
		k[5] = 0x10 | byte(tc.scope)
		k[8], k[9] = byte(tc.pkey>>8), byte(tc.pkey)
		if !bytes.Equal(a, k) {
			t.Errorf("Broadcast(%v, %v) = %x, the kernel's is %x", tc.pkey, tc.scope, []byte(a), k)
		}
		m := a.MGID()
		want := ipoib.MGIDFields{Flags: 1, Scope: tc.scope, Signature: ipoib.SignatureIPv4, PKey: tc.pkey,
			Group: [10]byte{6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff}}
		if diff := cmp.Diff(want, m.Fields()); diff != "" {
			t.Errorf("broadcast MGID (-want +got):\n%s", diff)
		}
		if !a.IsMulticast() || !m.IsIPoIB() || !m.IsBroadcast() || a.QPN() != ipoib.MulticastQPN || a.Flags() != 0 {
			t.Errorf("%v: multicast %v, IPoIB MGID %v, broadcast %v, QPN %#x, flags %v",
				a, a.IsMulticast(), m.IsIPoIB(), m.IsBroadcast(), a.QPN(), a.Flags())
		}
	}
}

// TestMulticastHwAddr: the addresses ip_ib_mc_map (include/net/ip.h) and
// ipv6_ib_mc_map (include/net/if_inet6.h) compute, worked out by hand from
// their code: scope and P_Key from the broadcast address, an IPv4 group's
// low 28 bits, an IPv6 group's last 10 bytes.
func TestMulticastHwAddr(t *testing.T) {
	bcast := ipoib.HwAddr(bytes.Clone(kernelBroadcast))
	bcast[8], bcast[9] = 0xff, 0xff
	child := ipoib.Broadcast(0x8001, ipoib.ScopeSiteLocal)
	for _, tc := range []struct {
		group string
		bcast ipoib.HwAddr
		want  string
	}{
		{"224.0.0.1", bcast, "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:00:00:00:01"},
		{"239.255.255.250", bcast, "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:0f:ff:ff:fa"},
		{"224.0.0.251", child, "00:ff:ff:ff:ff:15:40:1b:80:01:00:00:00:00:00:00:00:00:00:fb"},
		{"::ffff:224.0.0.1", bcast, "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:00:00:00:01"},
		{"ff02::1", bcast, "00:ff:ff:ff:ff:12:60:1b:ff:ff:00:00:00:00:00:00:00:00:00:01"},
		// The solicited-node group of fe80::202:c903:a:1e5a.
		{"ff02::1:ff0a:1e5a", bcast, "00:ff:ff:ff:ff:12:60:1b:ff:ff:00:00:00:00:00:01:ff:0a:1e:5a"},
		{"ff05::1:3", child, "00:ff:ff:ff:ff:15:60:1b:80:01:00:00:00:00:00:00:00:01:00:03"},
	} {
		a, err := ipoib.MulticastHwAddr(netip.MustParseAddr(tc.group), tc.bcast)
		if err != nil {
			t.Fatalf("MulticastHwAddr(%s): %v", tc.group, err)
		}
		if a.String() != tc.want {
			t.Errorf("MulticastHwAddr(%s, %v) = %v, want %s", tc.group, tc.bcast, a, tc.want)
		}
		if !a.IsMulticast() || !a.MGID().IsIPoIB() || a.MGID().IsBroadcast() {
			t.Errorf("%v: multicast %v, IPoIB MGID %v, broadcast %v", a, a.IsMulticast(), a.MGID().IsIPoIB(), a.MGID().IsBroadcast())
		}
	}
	if _, err := ipoib.MulticastHwAddr(netip.MustParseAddr("10.0.0.1"), bcast); err == nil {
		t.Error("MulticastHwAddr of a unicast address: no error")
	}
	if _, err := ipoib.MulticastHwAddr(netip.MustParseAddr("224.0.0.1"), bcast[:19]); !errors.Is(err, ipoib.ErrTruncated) {
		t.Errorf("MulticastHwAddr with a 19-byte broadcast address: %v, want ErrTruncated", err)
	}
}

func TestMGIDRoundTrip(t *testing.T) {
	for _, want := range []ipoib.MGIDFields{
		{Flags: 1, Scope: ipoib.ScopeLinkLocal, Signature: ipoib.SignatureIPv4, PKey: 0xffff, Group: [10]byte{6: 0xff, 7: 0xff, 8: 0xff, 9: 0xff}},
		{Flags: 0xf, Scope: ipoib.ScopeGlobal, Signature: ipoib.SignatureIPv6, PKey: 0x0001, Group: [10]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{},
	} {
		b := filled(ipoib.MGIDLen)
		ipoib.MGID(b).Encode(&want)
		if b[0] != 0xff {
			t.Errorf("Encode wrote %#x first, want 0xff", b[0])
		}
		if diff := cmp.Diff(want, ipoib.MGID(b).Fields()); diff != "" {
			t.Errorf("MGID round trip (-want +got):\n%s", diff)
		}
	}
	m := ipoib.MGID(filled(ipoib.MGIDLen))
	m.Encode(&ipoib.MGIDFields{Flags: 1, Scope: ipoib.ScopeLinkLocal, Signature: ipoib.SignatureIPv4})
	m.SetScope(ipoib.ScopeOrgLocal)
	m.SetPKey(0x8002)
	if m.Flags() != 1 || m.Scope() != ipoib.ScopeOrgLocal || m.PKey() != 0x8002 {
		t.Errorf("after setters: flags %d scope %v pkey %v", m.Flags(), m.Scope(), m.PKey())
	}
	for i := range ipoib.MGIDLen {
		if ipoib.MGID(m[:i]).IsValid() {
			t.Errorf("MGID of %d bytes IsValid", i)
		}
	}
	// A unicast GID is not an IPoIB MGID.
	u := hw(t, capturedAddrs[0].text)
	if u.MGID().IsIPoIB() || u.MGID().IsBroadcast() {
		t.Errorf("unicast %v reads as an IPoIB MGID", u)
	}
}

func TestScopeString(t *testing.T) {
	for s, want := range map[ipoib.Scope]string{
		ipoib.ScopeLinkLocal: "link-local", ipoib.ScopeSiteLocal: "site-local",
		ipoib.ScopeOrgLocal: "organization-local", ipoib.ScopeGlobal: "global", 3: "scope(3)",
	} {
		if got := s.String(); got != want {
			t.Errorf("Scope(%d) = %q, want %q", s, got, want)
		}
	}
}

func TestPKey(t *testing.T) {
	for _, tc := range []struct {
		in        string
		want      ipoib.PKey
		full      bool
		partition uint16
	}{
		{"0xffff\n", 0xffff, true, 0x7fff},
		{"0x8001", 0x8001, true, 1},
		{"7fff", 0x7fff, false, 0x7fff},
		{"0X0002", 0x0002, false, 2},
	} {
		p, err := ipoib.ParsePKey(tc.in)
		if err != nil || p != tc.want || p.Full() != tc.full || p.Partition() != tc.partition {
			t.Errorf("ParsePKey(%q) = %v (full %v, partition %d), %v; want %v, %v, %d",
				tc.in, p, p.Full(), p.Partition(), err, tc.want, tc.full, tc.partition)
		}
		if s := p.String(); len(s) != 6 || s[:2] != "0x" {
			t.Errorf("%v.String() = %q, want 0x and 4 digits", p, s)
		}
	}
	for _, bad := range []string{"", "0x", "0x10000", "ffffff", "-1", "0xgg"} {
		if _, err := ipoib.ParsePKey(bad); !errors.Is(err, ipoib.ErrBadText) {
			t.Errorf("ParsePKey(%q) = %v, want ErrBadText", bad, err)
		}
	}
}
