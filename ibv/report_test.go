package ibv_test

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

func fakeDevices() []ibv.DeviceInfo {
	rxe := ibv.DeviceInfo{
		Name: "rxe0", Transport: ibv.TransportIB, NodeGUID: "5054:00ff:fe12:3456", VendorID: 0xffffff,
		Attr: ibv.DeviceAttr{MaxQP: 1 << 17, MaxQPWR: 1 << 14, AtomicCap: "HCA", PhysPortCnt: 1,
			CapFlags: ibv.DeviceMemWindow | ibv.DeviceMemWindowType2B, MaxMW: 1 << 16},
		Ports: []ibv.PortInfo{{
			Port: 1, State: ibv.PortActive, PhysState: 5, LinkLayer: ibv.LinkLayerEthernet,
			MaxMTU: ibv.MTU4096, ActiveMTU: ibv.MTU1024, Speed: 1, Width: 1, GIDTableLen: 1024,
			GIDs: roceTable("rxe0", "veth0", "fe80::5054:ff:fe12:3456", "198.18.1.1"),
		}},
	}
	siw := ibv.DeviceInfo{
		Name: "siw0", Transport: ibv.TransportIWARP,
		Ports: []ibv.PortInfo{{Port: 1, State: ibv.PortActive, LinkLayer: ibv.LinkLayerEthernet, ActiveMTU: ibv.MTU1024,
			GIDs: []ibv.GIDEntry{{Device: "siw0", Port: 1, Index: 0, GID: gid("5254:0012:3457::"), Type: ibv.GIDTypeIB, Netdev: "veth2"}}}},
	}
	return []ibv.DeviceInfo{rxe, siw}
}

func fakeAddrs() []ibv.LocalAddr {
	return []ibv.LocalAddr{
		{Netdev: "veth0", IP: netip.MustParseAddr("198.18.1.1")},
		{Netdev: "veth2", IP: netip.MustParseAddr("198.18.2.1")},
	}
}

func TestDevicesReportText(t *testing.T) {
	rep := ibv.BuildDevicesReport(fakeDevices(), fakeAddrs())
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"rxe0: transport InfiniBand",
		"port 1: ACTIVE (LINK_UP), link layer Ethernet, active MTU 1024 (max 4096)",
		"3      ::ffff:198.18.1.1",
		"RoCEv2  veth0",
		"  memory windows: max_mw 65536, type 1 yes, type 2 yes\n",
		"siw0: transport iWARP",
		"  memory windows: max_mw 0, type 1 no, type 2 no\n",
		"198.18.1.1 (veth0): rxe0 port 1 index 3 (::ffff:198.18.1.1): the only RoCEv2 GID for 198.18.1.1 on netdev veth0",
		"198.18.2.1 (veth2): none: choose gid for 198.18.2.1 on netdev veth2: no GID table entry holds this address",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestDevicesReportJSON(t *testing.T) {
	rep := ibv.BuildDevicesReport(fakeDevices(), fakeAddrs())
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Devices []struct {
			Name  string
			Ports []struct {
				ActiveMTU int    `json:"active_mtu"`
				LinkLayer string `json:"link_layer"`
				GIDs      []struct {
					Index  int
					GID    string
					Type   string
					Netdev string
				}
			}
		}
		Choices []struct {
			IP     string
			Netdev string
			GID    *struct{ Index int }
			Reason string
		} `json:"gid_choices"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	p := back.Devices[0].Ports[0]
	if p.ActiveMTU != 1024 || p.LinkLayer != "Ethernet" || p.GIDs[3].GID != "::ffff:198.18.1.1" || p.GIDs[3].Type != "RoCEv2" || p.GIDs[3].Netdev != "veth0" {
		t.Errorf("JSON port: %+v", p)
	}
	if c := back.Choices[0]; c.GID == nil || c.GID.Index != 3 || c.IP != "198.18.1.1" {
		t.Errorf("JSON choice: %+v", c)
	}
	if c := back.Choices[1]; c.GID != nil || c.Reason == "" {
		t.Errorf("JSON choice without GID: %+v", c)
	}
}

func TestDevicesReportNone(t *testing.T) {
	rep := ibv.BuildDevicesReport(nil, fakeAddrs())
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "no RDMA devices found\n" {
		t.Errorf("report without devices = %q", got)
	}
	j, _ := json.Marshal(rep)
	if want := `{"devices":[],"gid_choices":[],"note":"no RDMA devices found"}`; string(j) != want {
		t.Errorf("JSON without devices = %s, want %s", j, want)
	}
}

// TestDevicesReportIPoIB: an address on an IPoIB netdev is shown with GID
// index 0 of the netdev's port, and one whose port is not known with why.
func TestDevicesReportIPoIB(t *testing.T) {
	ib := ibv.DeviceInfo{Name: "mlx4_0", Transport: ibv.TransportIB, Ports: []ibv.PortInfo{
		{Port: 1, State: ibv.PortActive, LinkLayer: ibv.LinkLayerInfiniBand, ActiveMTU: ibv.MTU4096, GIDs: ibTable()[:2]},
		{Port: 2, State: ibv.PortActive, LinkLayer: ibv.LinkLayerInfiniBand, ActiveMTU: ibv.MTU2048, GIDs: ibTable()[2:3]},
	}}
	addrs := []ibv.LocalAddr{
		{Netdev: "ib1", IP: netip.MustParseAddr("10.10.1.1"), IPoIB: &ibv.IPoIBPort{Netdev: "ib1", Device: "mlx4_0", Port: 2}},
		{Netdev: "ib9", IP: netip.MustParseAddr("10.10.9.1"), IPoIB: &ibv.IPoIBPort{Netdev: "ib9", Unknown: "no RDMA device"}},
	}
	rep := ibv.BuildDevicesReport([]ibv.DeviceInfo{ib}, addrs)
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"  10.10.1.1 (ib1): mlx4_0 port 2 index 0 (fe80::f452:1403:7b:e1b2): IPoIB netdev ib1 on mlx4_0 port 2: the port's GID index 0; the IP is reached through IPoIB\n",
		"  10.10.9.1 (ib9): none: choose gid for 10.10.9.1 on netdev ib9: it is on IPoIB netdev ib9, whose RDMA device and port are unknown (no RDMA device)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "RoCEv2 GID") {
		t.Errorf("report speaks of a RoCEv2 GID on a host with InfiniBand ports only:\n%s", out)
	}
}
