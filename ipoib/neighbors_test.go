package ipoib_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ipoib"
)

const (
	peerRC     = "80:00:0a:2a:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:c0:a1" // a ConnectX-3 peer
	peerNoRC   = "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56" // an enhanced-IPoIB peer
	allHostsIB = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:00:00:00:01" // 224.0.0.1, ip_ib_mc_map
)

// mlx4Host is the mlx4 fixture with its interfaces' links and the
// neighbour table of ib0 (connected mode) and ib1 (datagram).
func mlx4Host(t *testing.T) (*ipoib.Host, []ipoib.Interface) {
	t.Helper()
	nl := &fakeNetlink{
		links: append(otherLinks(t),
			ipoibLink(t, 6, 0, "ib0", "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1", 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED),
			ipoibLink(t, 7, 0, "ib1", "80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2", 2044, 0xffff, netlink.IPOIB_MODE_DATAGRAM)),
		neighs: []netlink.Neigh{
			neigh(t, 6, "10.0.0.2", netlink.NUD_REACHABLE, peerRC),
			neigh(t, 6, "10.0.0.3", netlink.NUD_STALE, peerNoRC),
			neigh(t, 6, "10.0.0.4", netlink.NUD_INCOMPLETE, ""),
			neigh(t, 6, "10.0.0.5", netlink.NUD_FAILED, ""),
			neigh(t, 6, "224.0.0.1", netlink.NUD_NOARP, allHostsIB),
			neigh(t, 6, "fe80::f652:1403:7b:c0a1", netlink.NUD_REACHABLE|netlink.NUD_PERMANENT, peerRC),
			// What the kernel keeps for a netdev with 6-byte addresses
			// that was set to ARPHRD_INFINIBAND.
			neigh(t, 6, "10.0.0.6", netlink.NUD_PERMANENT, "80:00:00:48:fe:80"),
			neigh(t, 7, "10.0.1.2", netlink.NUD_REACHABLE, peerRC),
		},
	}
	h := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: os.DirFS("testdata/mlx4")})
	ifs, err := h.Interfaces()
	if err != nil || len(ifs) != 2 {
		t.Fatalf("Interfaces = %v, %v", ifs, err)
	}
	return h, ifs
}

func TestNeighbors(t *testing.T) {
	h, ifs := mlx4Host(t)
	rc, norc := hw(t, peerRC), hw(t, peerNoRC)
	want := []ipoib.Neighbor{
		{IP: netip.MustParseAddr("10.0.0.2"), Interface: "ib0", State: "REACHABLE", HwAddr: rc,
			GID: gid(t, "fe80::f452:1403:7b:c0a1"), QPN: 0x0a2a, Flags: ipoib.FlagRC, Connected: true},
		{IP: netip.MustParseAddr("10.0.0.3"), Interface: "ib0", State: "STALE", HwAddr: norc,
			GID: gid(t, "fe80::b8ce:f603:12:3456"), QPN: 0x1087},
		{IP: netip.MustParseAddr("10.0.0.4"), Interface: "ib0", State: "INCOMPLETE", Note: "no hardware address"},
		{IP: netip.MustParseAddr("10.0.0.5"), Interface: "ib0", State: "FAILED", Note: "no hardware address"},
		{IP: netip.MustParseAddr("224.0.0.1"), Interface: "ib0", State: "NOARP", HwAddr: hw(t, allHostsIB),
			GID: gid(t, "ff12:401b:ffff::1"), QPN: ipoib.MulticastQPN, Multicast: true},
		{IP: netip.MustParseAddr("fe80::f652:1403:7b:c0a1"), Interface: "ib0", State: "REACHABLE,PERMANENT", HwAddr: rc,
			GID: gid(t, "fe80::f452:1403:7b:c0a1"), QPN: 0x0a2a, Flags: ipoib.FlagRC, Connected: true},
		{IP: netip.MustParseAddr("10.0.0.6"), Interface: "ib0", State: "PERMANENT", Note: "hardware address 80:00:00:48:fe:80 is 6 bytes, not 20"},
	}
	got, err := h.Neighbors(ifs[0])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, equateAddrs); diff != "" {
		t.Errorf("Neighbors(ib0) (-want +got):\n%s", diff)
	}
	// ib1 is in datagram mode: an RC-capable peer is still reached by datagrams.
	got, err = h.Neighbors(ifs[1])
	if err != nil || len(got) != 1 || got[0].IP != netip.MustParseAddr("10.0.1.2") || got[0].Connected || got[0].Flags != ipoib.FlagRC {
		t.Errorf("Neighbors(ib1) = %+v, %v; want 10.0.1.2 by datagram", got, err)
	}
}

func TestNeighbor(t *testing.T) {
	h, ifs := mlx4Host(t)
	for _, tc := range []struct {
		ip      string
		wantGID string
		wantErr string // a substring; "" for success
	}{
		{ip: "10.0.0.2", wantGID: "fe80::f452:1403:7b:c0a1"},
		{ip: "::ffff:10.0.0.2", wantGID: "fe80::f452:1403:7b:c0a1"},
		{ip: "10.0.0.3", wantGID: "fe80::b8ce:f603:12:3456"}, // STALE: the address is known, the kernel re-confirms it
		{ip: "10.0.0.4", wantErr: "entry INCOMPLETE: no hardware address"},
		{ip: "10.0.0.5", wantErr: "entry FAILED: no hardware address"},
		{ip: "224.0.0.1", wantErr: "a multicast group"},
		{ip: "10.0.0.6", wantErr: "6 bytes, not 20"},
		{ip: "10.0.0.9", wantErr: "not in the neighbour table"},
		{ip: "10.0.1.2", wantErr: "not in the neighbour table"}, // ib1's, not ib0's
	} {
		n, err := h.Neighbor(ifs[0], netip.MustParseAddr(tc.ip))
		if tc.wantErr != "" {
			if !errors.Is(err, ipoib.ErrNoNeighbor) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Neighbor(%s) = %v, want ErrNoNeighbor with %q", tc.ip, err, tc.wantErr)
			}
			continue
		}
		if err != nil || n.GID != gid(t, tc.wantGID) {
			t.Errorf("Neighbor(%s) = GID %v, %v; want %s", tc.ip, n.GID, err, tc.wantGID)
		}
	}
}

func TestNeighborsDumpError(t *testing.T) {
	boom := errors.New("netlink: no buffer space")
	h := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{neighErr: boom}, Root: os.DirFS("testdata/mlx4")})
	_, err := h.Neighbors(ipoib.Interface{Name: "ib0", Index: 6})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "list the neighbours of ib0: ") {
		t.Errorf("Neighbors with a failing dump = %v", err)
	}
}

func TestNUDState(t *testing.T) {
	for s, want := range map[int]string{
		netlink.NUD_NONE: "NONE", netlink.NUD_REACHABLE: "REACHABLE", netlink.NUD_NOARP: "NOARP",
		netlink.NUD_STALE | netlink.NUD_PERMANENT: "STALE,PERMANENT", 0x100: "0x100",
	} {
		if got := ipoib.NUDState(s); got != want {
			t.Errorf("NUDState(%#x) = %q, want %q", s, got, want)
		}
	}
}
