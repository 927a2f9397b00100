package ipoib_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
)

// filled returns n bytes of 0xFF, so that a byte an encoder never writes
// shows up in the round trip.
func filled(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

func gid(t testing.TB, s string) ibv.GID {
	t.Helper()
	g, err := ibv.ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func hw(t testing.TB, s string) ipoib.HwAddr {
	t.Helper()
	a, err := ipoib.ParseHwAddrText(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// capturedAddrs are IPoIB hardware addresses as `ip addr` printed them on
// real hosts, with the fields they carry and the IPv6 link-local address
// the same capture shows on the interface (the kernel's
// addrconf_ifid_infiniband), where it shows one.
var capturedAddrs = []struct {
	name      string
	text      string
	want      ipoib.HwAddrFields
	prefix    uint64
	guid      uint64
	linkLocal string
}{{
	// Red Hat Enterprise Linux 9, "Configuring InfiniBand and RDMA
	// networks", 4.1: a ConnectX-3 port in connected mode, MTU 65520.
	name:      "mlx4 connected",
	text:      "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1",
	want:      ipoib.HwAddrFields{Flags: ipoib.FlagRC, QPN: 0x000a28},
	prefix:    0xfe80000000000000,
	guid:      0xf4521403007be1b1,
	linkLocal: "fe80::f652:1403:7b:e1b1",
}, {
	// An `ip addr` capture of a datagram-mode interface, MTU 2044.
	name:      "datagram 2044",
	text:      "80:00:02:08:fe:80:00:00:00:00:00:00:50:6b:4b:03:00:80:34:41",
	want:      ipoib.HwAddrFields{Flags: ipoib.FlagRC, QPN: 0x000208},
	prefix:    0xfe80000000000000,
	guid:      0x506b4b0300803441,
	linkLocal: "fe80::526b:4b03:80:3441",
}, {
	// A capture with a subnet prefix set by the subnet manager.
	name:   "subnet prefix fe80:0:0:1",
	text:   "80:00:00:48:fe:80:00:00:00:00:00:01:00:02:c9:03:00:4e:47:cf",
	want:   ipoib.HwAddrFields{Flags: ipoib.FlagRC, QPN: 0x000048},
	prefix: 0xfe80000000000001,
	guid:   0x0002c903004e47cf,
}}

func TestHwAddrCaptured(t *testing.T) {
	for _, c := range capturedAddrs {
		t.Run(c.name, func(t *testing.T) {
			a := hw(t, c.text)
			want := c.want
			want.GID = gid(t, "fe80::")
			pfx, guid := c.prefix, c.guid
			for i := range 8 {
				want.GID[7-i], want.GID[15-i] = byte(pfx>>(8*i)), byte(guid>>(8*i))
			}
			if diff := cmp.Diff(want, a.Fields()); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if a.SubnetPrefix() != c.prefix || a.GUID() != c.guid {
				t.Errorf("subnet prefix %#x GUID %#x, want %#x %#x", a.SubnetPrefix(), a.GUID(), c.prefix, c.guid)
			}
			if a.IsMulticast() {
				t.Errorf("unicast address %v says multicast", a)
			}
			if got := a.String(); got != c.text {
				t.Errorf("String() = %q, want the capture's %q", got, c.text)
			}
			if c.linkLocal != "" {
				if got, want := a.LinkLocal(), netip.MustParseAddr(c.linkLocal); got != want {
					t.Errorf("LinkLocal() = %v, want %v (the capture's inet6 scope link)", got, want)
				}
			}
		})
	}
}

func TestHwAddrRoundTrip(t *testing.T) {
	for _, want := range []ipoib.HwAddrFields{
		{},
		{Flags: ipoib.FlagRC, QPN: 0x48, GID: gid(t, "fe80::2:c903:a:1e5a")},
		{Flags: ipoib.FlagRC | ipoib.FlagUC | 0x01, QPN: 0xffffff, GID: gid(t, "ff12:401b:ffff::ffff:ffff")},
		{QPN: 0x800001, GID: gid(t, "fe80:0:0:1:ffff:ffff:ffff:ffff")},
	} {
		b := filled(ipoib.HwAddrLen)
		ipoib.HwAddr(b).Encode(&want)
		a, n, err := ipoib.ParseHwAddr(b)
		if err != nil || n != ipoib.HwAddrLen {
			t.Fatalf("ParseHwAddr(%x) = _, %d, %v", b, n, err)
		}
		if diff := cmp.Diff(want, a.Fields()); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		if got := ipoib.AppendHwAddr([]byte{0xaa}, &want); !bytes.Equal(got[1:], b) || got[0] != 0xaa {
			t.Errorf("AppendHwAddr = %x, want aa then %x", got, b)
		}
		txt, err := ipoib.ParseHwAddrText(a.String())
		if err != nil || !bytes.Equal(txt, b) {
			t.Errorf("ParseHwAddrText(%q) = %x, %v; want %x", a.String(), txt, err, b)
		}
	}
}

func TestHwAddrSetters(t *testing.T) {
	a := ipoib.HwAddr(filled(ipoib.HwAddrLen))
	a.SetFlags(ipoib.FlagRC)
	a.SetQPN(0x1_234567) // above 24 bits: the top is dropped
	a.SetGID(gid(t, "fe80::f452:1403:7b:e1b1"))
	want := ipoib.HwAddrFields{Flags: ipoib.FlagRC, QPN: 0x234567, GID: gid(t, "fe80::f452:1403:7b:e1b1")}
	if diff := cmp.Diff(want, a.Fields()); diff != "" {
		t.Errorf("after setters (-want +got):\n%s", diff)
	}
	if got, want := a.String(), "80:23:45:67:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestHwAddrCutAtEveryPrefix(t *testing.T) {
	valid := hw(t, capturedAddrs[0].text)
	for i := range ipoib.HwAddrLen {
		if ipoib.HwAddr(valid[:i]).IsValid() {
			t.Errorf("IsValid() of %d bytes = true", i)
		}
		a, n, err := ipoib.ParseHwAddr(valid[:i])
		if !errors.Is(err, ipoib.ErrTruncated) || n != 0 || a != nil {
			t.Errorf("cut at %d: got %x, %d, %v; want nil, 0, ErrTruncated", i, a, n, err)
		}
	}
	// Longer input: the view is the first 20 bytes.
	long := append(bytes.Clone(valid), 0xee, 0xee)
	a, n, err := ipoib.ParseHwAddr(long)
	if err != nil || n != ipoib.HwAddrLen || !bytes.Equal(a, valid) {
		t.Errorf("ParseHwAddr of 22 bytes = %x, %d, %v; want %x, 20, nil", a, n, err, valid)
	}
	// Text cut anywhere is an error, never a shorter address.
	s := capturedAddrs[0].text
	for i := range len(s) {
		if a, err := ipoib.ParseHwAddrText(s[:i]); !errors.Is(err, ipoib.ErrBadText) || a != nil {
			t.Errorf("ParseHwAddrText(%q) = %x, %v; want ErrBadText", s[:i], a, err)
		}
	}
}

func TestParseHwAddrText(t *testing.T) {
	ok := "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1"
	if a, err := ipoib.ParseHwAddrText("80:00:0A:28:FE:80:00:00:00:00:00:00:F4:52:14:03:00:7B:E1:B1"); err != nil || a.String() != ok {
		t.Errorf("upper case: %v, %v; want %s", a, err, ok)
	}
	for _, bad := range []string{
		"",
		"80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1",       // 19 bytes
		"80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1:00", // 21 bytes
		"80-00-0a-28-fe-80-00-00-00-00-00-00-f4-52-14-03-00-7b-e1-b1",    // not the kernel's form
		"80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:bg",
		"80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1 b1",
		"18:03:73:ff:b4:5a", // an Ethernet address
	} {
		if a, err := ipoib.ParseHwAddrText(bad); !errors.Is(err, ipoib.ErrBadText) || a != nil {
			t.Errorf("ParseHwAddrText(%q) = %v, %v; want ErrBadText", bad, a, err)
		}
	}
}

func TestHwAddrText(t *testing.T) {
	var a ipoib.HwAddr
	err := a.UnmarshalText([]byte(capturedAddrs[1].text))
	if err != nil {
		t.Fatal(err)
	}
	b, err := a.MarshalText()
	if err != nil || string(b) != capturedAddrs[1].text {
		t.Errorf("MarshalText = %q, %v; want %q", b, err, capturedAddrs[1].text)
	}
	if err := a.UnmarshalText([]byte("zz")); !errors.Is(err, ipoib.ErrBadText) {
		t.Errorf("UnmarshalText(zz) = %v, want ErrBadText", err)
	}
	// Other lengths format whole, as net.HardwareAddr does.
	if got := (ipoib.HwAddr{0x08}).String(); got != "08" {
		t.Errorf("1-byte String() = %q", got)
	}
}

func TestFlagsString(t *testing.T) {
	for f, want := range map[ipoib.Flags]string{
		0:                            "0",
		ipoib.FlagRC:                 "RC",
		ipoib.FlagRC | ipoib.FlagUC:  "RC|UC",
		ipoib.FlagUC | 0x05:          "UC|0x05",
		ipoib.Flags(0x80 | 0x40 | 1): "RC|UC|0x01",
	} {
		if got := f.String(); got != want {
			t.Errorf("Flags(%#x).String() = %q, want %q", uint8(f), got, want)
		}
	}
}
