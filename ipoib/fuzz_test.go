package ipoib_test

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ipoib"
)

// Fuzz targets, seeded from the serializers and the captures. Run one with
//   go test ./ipoib -run '^$' -fuzz FuzzHwAddr -fuzztime 30s

// FuzzHwAddr: ParseHwAddr never panics, succeeds exactly from 20 bytes on,
// and what it decodes encodes back to the same bytes, through the fields
// and through the text form.
func FuzzHwAddr(f *testing.F) {
	for _, c := range capturedAddrs {
		a, err := ipoib.ParseHwAddrText(c.text)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(a))
	}
	f.Add([]byte(ipoib.Broadcast(ipoib.DefaultPKey, ipoib.ScopeLinkLocal)))
	f.Add(ipoib.AppendHwAddr(nil, &ipoib.HwAddrFields{Flags: 0xff, QPN: 0xffffff}))
	f.Add([]byte{0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, n, err := ipoib.ParseHwAddr(b)
		if (err == nil) != (len(b) >= ipoib.HwAddrLen) {
			t.Fatalf("ParseHwAddr(%d bytes) error %v", len(b), err)
		}
		if err != nil {
			return
		}
		if n != ipoib.HwAddrLen || len(a) != ipoib.HwAddrLen {
			t.Fatalf("ParseHwAddr consumed %d, view %d bytes", n, len(a))
		}
		fields := a.Fields()
		if got := ipoib.AppendHwAddr(nil, &fields); !bytes.Equal(got, b[:n]) {
			t.Fatalf("%x re-encodes as %x", b[:n], got)
		}
		txt, err := ipoib.ParseHwAddrText(a.String())
		if err != nil || !bytes.Equal(txt, b[:n]) {
			t.Fatalf("text %q parses as %x, %v", a.String(), txt, err)
		}
		if a.IsMulticast() != (a.QPN() == ipoib.MulticastQPN && b[4] == 0xff) {
			t.Fatalf("IsMulticast %v for %v", a.IsMulticast(), a)
		}
		if ll := a.LinkLocal(); !ll.IsLinkLocalUnicast() {
			t.Fatalf("LinkLocal %v is not link-local", ll)
		}
		m := a.MGID()
		mf := m.Fields()
		out := make([]byte, ipoib.MGIDLen)
		ipoib.MGID(out).Encode(&mf)
		in := bytes.Clone(b[4:20])
		in[0] = 0xff // Encode always writes the multicast byte
		if !bytes.Equal(in, out) {
			t.Fatalf("MGID %x re-encodes as %x", in, out)
		}
		if m.IsBroadcast() && !m.IsIPoIB() {
			t.Fatalf("%x: broadcast but not an IPoIB MGID", []byte(m))
		}
	})
}

// FuzzHwAddrText: ParseHwAddrText never panics; what it accepts is 20
// bytes that format back to the input, case aside.
func FuzzHwAddrText(f *testing.F) {
	for _, c := range capturedAddrs {
		f.Add(c.text)
		f.Add(strings.ToUpper(c.text))
	}
	f.Add("00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:f")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ipoib.ParseHwAddrText(s)
		if err != nil {
			if a != nil {
				t.Fatalf("ParseHwAddrText(%q) failed but returned %x", s, []byte(a))
			}
			return
		}
		if len(a) != ipoib.HwAddrLen || a.String() != strings.ToLower(s) {
			t.Fatalf("ParseHwAddrText(%q) = %v (%d bytes)", s, a, len(a))
		}
	})
}

// FuzzMulticastHwAddr: any multicast group maps, on any broadcast
// address, to a multicast address of the broadcast's partition and scope
// with the family's signature.
func FuzzMulticastHwAddr(f *testing.F) {
	f.Add([]byte{224, 0, 0, 1}, []byte(ipoib.Broadcast(ipoib.DefaultPKey, ipoib.ScopeLinkLocal)))
	f.Add(netip.MustParseAddr("ff02::1:ff0a:1e5a").AsSlice(), []byte(ipoib.Broadcast(0x8001, ipoib.ScopeSiteLocal)))
	f.Fuzz(func(t *testing.T, ip, bcast []byte) {
		g, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		a, err := ipoib.MulticastHwAddr(g, bcast)
		if err != nil {
			return
		}
		if !g.Unmap().IsMulticast() || len(bcast) < ipoib.HwAddrLen {
			t.Fatalf("mapped %v on a %d-byte broadcast", g, len(bcast))
		}
		b := ipoib.HwAddr(bcast)
		sig := ipoib.SignatureIPv6
		if g.Unmap().Is4() {
			sig = ipoib.SignatureIPv4
		}
		m := a.MGID()
		if !a.IsMulticast() || m.Signature() != sig || m.PKey() != b.MGID().PKey() || m.Scope() != b.MGID().Scope() || a.Flags() != 0 {
			t.Fatalf("MulticastHwAddr(%v, %v) = %v", g, b, a)
		}
	})
}
