package ipoib_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce"
)

func TestReportText(t *testing.T) {
	links := append(otherLinks(t),
		ipoibLink(t, 6, 0, "ib0", "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1", 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED),
		ipoibLink(t, 7, 0, "ib1", "80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2", 2044, 0xffff, netlink.IPOIB_MODE_DATAGRAM))
	nl := &fakeNetlink{
		links: links,
		addrs: map[int][]netlink.Addr{6: {addr(t, "172.31.0.181/24"), addr(t, "fe80::f652:1403:7b:e1b1/64")}},
		neighs: []netlink.Neigh{
			neigh(t, 6, "172.31.0.186", netlink.NUD_REACHABLE, peerRC),
			neigh(t, 6, "172.31.0.187", netlink.NUD_STALE, peerNoRC),
			neigh(t, 6, "172.31.0.188", netlink.NUD_INCOMPLETE, ""),
			neigh(t, 6, "224.0.0.1", netlink.NUD_NOARP, allHostsIB),
		},
	}
	h := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: os.DirFS("testdata/mlx4"),
		PortMTU: portMTUs(map[string]roce.MTU{"mlx4_0/1": roce.MTU2048})})
	r, err := h.Report()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `IPoIB interfaces:
  ib0 (index 6): mlx4_0 port 1, up, connected mode, MTU 65520, P_Key 0xffff, umcast 0
    GID fe80::f452:1403:7b:e1b1, QPN 0x000a28, flags RC, address 80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1
    MTU allowed: datagram up to 2044 (IB MTU 2048 less 4); connected up to 65520
    addresses: 172.31.0.181/24, fe80::f652:1403:7b:e1b1/64
    neighbour 172.31.0.186: REACHABLE, GID fe80::f452:1403:7b:c0a1, QPN 0x000a2a, connected
    neighbour 172.31.0.187: STALE, GID fe80::b8ce:f603:12:3456, QPN 0x001087, datagram
    neighbour 172.31.0.188: INCOMPLETE, no hardware address
    neighbour 224.0.0.1: NOARP, multicast group ff12:401b:ffff::1
  ib1 (index 7): mlx4_0 port 2, up, datagram mode, MTU 2044, P_Key 0xffff, umcast 1
    GID fe80::f452:1403:7b:e1b2, QPN 0x000a29, flags RC, address 80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2
    MTU allowed: datagram up to the IB MTU less 4 (the port's MTU is not known here); connected up to 65520
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
}

func TestReportChildAndNotes(t *testing.T) {
	links := append(otherLinks(t),
		ipoibLink(t, 4, 0, "ib0", "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0xffff, 0),
		ipoibLink(t, 5, 4, "ib0.8001", "00:00:10:88:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0x8001, 0),
		&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Index: 9, Name: "tun9", MTU: 1500, EncapType: ipoib.EncapInfiniband}})
	r, err := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{links: links}, Root: os.DirFS("testdata/mlx5")}).Report()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  ib0 (index 4): mlx5_0 port 1, up, datagram mode, MTU 4092, P_Key 0xffff, umcast 0\n",
		"    GID fe80::b8ce:f603:12:3456, QPN 0x001087, flags 0, address 00:00:10:87:",
		"no connected mode (the address lacks the RC flag)",
		"  ib0.8001 (index 5): P_Key child of ib0, mlx5_0 port 1, up, datagram mode, MTU 4092, P_Key 0x8001, umcast 0\n",
		"  tun9 (index 9): RDMA device unknown, unknown, unknown mode, MTU 1500, P_Key 0x0000, umcast 0\n",
		"    note: hardware address is 0 bytes, not the 20 of an IPoIB address",
		"    MTU allowed: datagram up to the IB MTU less 4 (the port's MTU is not known here); connected mode unknown (no IPoIB hardware address)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "tun9 (index 9): RDMA device unknown, unknown, unknown mode, MTU 1500, P_Key 0x0000, umcast 0\n    GID") {
		t.Errorf("report shows a GID for an interface without an IPoIB address:\n%s", b.String())
	}
}

func TestReportNone(t *testing.T) {
	r, err := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{links: otherLinks(t)}, Root: fstest.MapFS{}}).Report()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if b.String() != "no IPoIB interfaces\n" {
		t.Errorf("report = %q, want %q", b.String(), "no IPoIB interfaces\n")
	}
	j, err := json.Marshal(r)
	if err != nil || string(j) != `{"interfaces":[],"note":"no IPoIB interfaces"}` {
		t.Errorf("JSON = %s, %v", j, err)
	}
}

// TestReportJSON: the JSON keys and value forms: text for addresses, GIDs,
// P_Keys, modes and flags; the IB MTU in bytes.
func TestReportJSON(t *testing.T) {
	links := append(otherLinks(t),
		ipoibLink(t, 6, 0, "ib0", "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1", 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED))
	nl := &fakeNetlink{links: links, neighs: []netlink.Neigh{neigh(t, 6, "172.31.0.186", netlink.NUD_REACHABLE, peerRC)}}
	r, err := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: os.DirFS("testdata/mlx4"),
		PortMTU: portMTUs(map[string]roce.MTU{"mlx4_0/1": roce.MTU2048})}).Report()
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"interfaces":[{"name":"ib0","index":6,"mtu":65520,"oper_state":"up","addrs":[],` +
		`"hw_addr":"80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1","gid":"fe80::f452:1403:7b:e1b1",` +
		`"qpn":2600,"flags":"RC","mode":"connected","umcast":false,"pkey":"0xffff","device":"mlx4_0","port":1,` +
		`"ib_mtu":2048,"max_mtu":{"datagram":2044,"connected":65520},` +
		`"neighbors":[{"ip":"172.31.0.186","interface":"ib0","state":"REACHABLE",` +
		`"hw_addr":"80:00:0a:2a:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:c0:a1","gid":"fe80::f452:1403:7b:c0a1",` +
		`"qpn":2602,"flags":"RC","connected":true}]}]}`
	if diff := cmp.Diff(want, string(j)); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
}
