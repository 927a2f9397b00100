package leg

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
)

// The GIDs of the fake host's ports: mlx4_0, a dual-port InfiniBand HCA
// (port GUIDs ...e1b1 and ...e1b2), and rxe0 on eth0.
const (
	ibPort1GID = "fe80::f452:1403:7b:e1b1"
	ibPort2GID = "fe80::f452:1403:7b:e1b2"
)

// ibSysfs writes, under a new directory standing for "/", the sysfs of a
// host with the dual-port InfiniBand HCA mlx4_0 on PCI function
// 0000:04:00.0 and its IPoIB interfaces, as Linux lays them out
// (drivers/infiniband/ulp/ipoib/ipoib_main.c, ipoib_parent_init: the
// netdev's device is the HCA's parent, dev_port and dev_id the port less
// one; net-sysfs: type in decimal, dev_id in hex): ib0 on port 1, ib1 on
// port 2, and ib2, of type ARPHRD_INFINIBAND but with no device link (a
// driver that set none).
func ibSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	w := func(name, content string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	pci := "sys/devices/pci0000:00/0000:04:00.0"
	hca := pci + "/infiniband/mlx4_0"
	w(hca+"/node_type", "1: CA")
	link("sys/class/infiniband/mlx4_0", "../../devices/pci0000:00/0000:04:00.0/infiniband/mlx4_0")
	for port, g := range map[string]string{"1": "fe80:0000:0000:0000:f452:1403:007b:e1b1", "2": "fe80:0000:0000:0000:f452:1403:007b:e1b2"} {
		w(hca+"/ports/"+port+"/link_layer", "InfiniBand")
		w(hca+"/ports/"+port+"/state", "4: ACTIVE")
		w(hca+"/ports/"+port+"/gids/0", g)
	}
	for _, n := range []struct{ name, devPort, devID string }{{"ib0", "0", "0x0"}, {"ib1", "1", "0x1"}} {
		w("sys/class/net/"+n.name+"/type", "32")
		w("sys/class/net/"+n.name+"/mode", "datagram")
		w("sys/class/net/"+n.name+"/dev_port", n.devPort)
		w("sys/class/net/"+n.name+"/dev_id", n.devID)
		link("sys/class/net/"+n.name+"/device", "../../../devices/pci0000:00/0000:04:00.0")
	}
	w("sys/class/net/ib2/type", "32")
	w("sys/class/net/ib2/mode", "datagram")
	w("sys/class/net/eth0/type", "1")
	return root
}

// fakeNetlink is the host's rtnetlink as package ipoib asks it: the
// links of ibSysfs's host and their addresses.
type fakeNetlink struct {
	t     *testing.T
	links []netlink.Link
	addrs map[int][]string
}

var _ ipoib.Netlink = (*fakeNetlink)(nil)

func (f *fakeNetlink) LinkList() ([]netlink.Link, error) { return f.links, nil }

func (f *fakeNetlink) AddrList(l netlink.Link, _ int) ([]netlink.Addr, error) {
	var out []netlink.Addr
	for _, s := range f.addrs[l.Attrs().Index] {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			f.t.Fatal(err)
		}
		n.IP = ip
		out = append(out, netlink.Addr{IPNet: n})
	}
	return out, nil
}

func (f *fakeNetlink) NeighList(int, int) ([]netlink.Neigh, error) { return nil, nil }

// ibNetlink gives ib0 10.10.0.1, ib1 10.10.1.1, ib2 10.10.2.1 and eth0
// 10.20.0.1; each IPoIB link's hardware address carries its port's GID 0
// (ib2's a GID no port has).
func ibNetlink(t *testing.T) *fakeNetlink {
	ipoibLink := func(index int, name, hw string) netlink.Link {
		a, err := net.ParseMAC(hw)
		if err != nil {
			t.Fatal(err)
		}
		return &netlink.IPoIB{LinkAttrs: netlink.LinkAttrs{Index: index, Name: name, MTU: 2044, HardwareAddr: a,
			EncapType: ipoib.EncapInfiniband, OperState: netlink.OperUp}}
	}
	return &fakeNetlink{t: t,
		links: []netlink.Link{
			&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo", EncapType: "loopback"}},
			&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 2, Name: "eth0", EncapType: "ether", HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}}},
			ipoibLink(6, "ib0", "00:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1"),
			ipoibLink(7, "ib1", "00:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2"),
			ipoibLink(8, "ib2", "00:00:0a:2a:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:99:99"),
		},
		addrs: map[int][]string{2: {"10.20.0.1/24"}, 6: {"10.10.0.1/24"}, 7: {"10.10.1.1/24"}, 8: {"10.10.2.1/24"}},
	}
}

// ibGIDTable is the GID table libibverbs gives on that host: each
// InfiniBand port's GID 0 (type IB, no netdev), and rxe0's RoCE entries
// for eth0's address.
func ibGIDTable(t *testing.T) []ibv.GIDEntry {
	g := func(s string) ibv.GID {
		v, err := ibv.ParseGID(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	return []ibv.GIDEntry{
		{Device: "mlx4_0", Port: 1, Index: 0, GID: g(ibPort1GID), Type: ibv.GIDTypeIB},
		{Device: "mlx4_0", Port: 2, Index: 0, GID: g(ibPort2GID), Type: ibv.GIDTypeIB},
		{Device: "rxe0", Port: 1, Index: 0, GID: g("fe80::200:ff:fe00:1"), Type: ibv.GIDTypeIB, Netdev: "eth0"},
		{Device: "rxe0", Port: 1, Index: 1, GID: g("fe80::200:ff:fe00:1"), Type: ibv.GIDTypeRoCEv2, Netdev: "eth0"},
		{Device: "rxe0", Port: 1, Index: 2, GID: g("10.20.0.1"), Type: ibv.GIDTypeIB, Netdev: "eth0"},
		{Device: "rxe0", Port: 1, Index: 3, GID: g("10.20.0.1"), Type: ibv.GIDTypeRoCEv2, Netdev: "eth0"},
	}
}

// TestChooseLegGID: a verbs leg whose ip is on an IPoIB interface is on
// that interface's port (found through a fake sysfs), with GID index 0;
// the device and port it names must be those; a RoCE address keeps its
// RoCEv2 GID; an IPoIB interface without a device link, whose port
// nothing finds, is a clear error; an address nothing holds is still
// ibv.ErrNoGID (which ExplainNoGID puts in an InfiniBand user's words).
func TestChooseLegGID(t *testing.T) {
	h := ipoib.NewHost(ipoib.Options{Root: os.DirFS(ibSysfs(t)), Netlink: ibNetlink(t)})
	for _, tc := range []struct {
		name   string
		ip     string
		device string
		port   int
		// want: device, port, index, type and GID chosen, and the reason;
		// or the error (its sentinel and text).
		wantDev   string
		wantPort  int
		wantIndex int
		wantType  ibv.GIDType
		wantGID   string
		wantIPoIB string
		why       string
		wantErr   error
	}{
		{name: "IPoIB on port 1", ip: "10.10.0.1", wantDev: "mlx4_0", wantPort: 1, wantIndex: 0, wantType: ibv.GIDTypeIB, wantGID: ibPort1GID, wantIPoIB: "ib0",
			why: "IPoIB netdev ib0 on mlx4_0 port 1: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "IPoIB on port 2", ip: "10.10.1.1", wantDev: "mlx4_0", wantPort: 2, wantIndex: 0, wantType: ibv.GIDTypeIB, wantGID: ibPort2GID, wantIPoIB: "ib1",
			why: "IPoIB netdev ib1 on mlx4_0 port 2: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "IPoIB, its device and port named", ip: "10.10.1.1", device: "mlx4_0", port: 2, wantDev: "mlx4_0", wantPort: 2, wantIndex: 0, wantType: ibv.GIDTypeIB, wantGID: ibPort2GID, wantIPoIB: "ib1",
			why: "IPoIB netdev ib1 on mlx4_0 port 2: the port's GID index 0; the IP is reached through IPoIB"},
		{name: "IPoIB, another device named", ip: "10.10.0.1", device: "rxe0", wantErr: ibv.ErrWrongPort,
			why: "choose gid for 10.10.0.1 on device rxe0: 10.10.0.1 is on IPoIB netdev ib0 on mlx4_0 port 1; name that device and port, or leave them out"},
		{name: "IPoIB, another port named", ip: "10.10.1.1", device: "mlx4_0", port: 1, wantErr: ibv.ErrWrongPort,
			why: "choose gid for 10.10.1.1 on device mlx4_0 port 1: 10.10.1.1 is on IPoIB netdev ib1 on mlx4_0 port 2; name that device and port, or leave them out"},
		{name: "RoCE", ip: "10.20.0.1", wantDev: "rxe0", wantPort: 1, wantIndex: 3, wantType: ibv.GIDTypeRoCEv2, wantGID: "::ffff:10.20.0.1",
			why: "the only RoCEv2 GID for 10.20.0.1; skipped rxe0 port 1 index 2 IB ::ffff:10.20.0.1 (eth0) (not RoCEv2)"},
		{name: "IPoIB without a device link", ip: "10.10.2.1", wantErr: ibv.ErrNoIPoIBGID,
			why: "choose gid for 10.10.2.1: it is on IPoIB netdev ib2, whose RDMA device and port are unknown (no RDMA device: read /sys/class/net/ib2/device/infiniband: no such file or directory; no RDMA port has GID 0 fe80::2:c903:a:9999: looked at the ports of 1 RDMA devices)"},
		{name: "nowhere", ip: "10.30.0.1", wantErr: ibv.ErrNoGID,
			why: "choose gid for 10.30.0.1: no GID table entry holds this address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &config.Leg{Name: "ib", Kind: config.KindVerbs, IP: netip.MustParseAddr(tc.ip), Device: tc.device, Port: tc.port}
			got, err := chooseLegGID(l, ibGIDTable(t), h, "", nil)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.HasPrefix(err.Error(), tc.why) {
					t.Fatalf("chooseLegGID: error\n%v\nwant %v, beginning\n%s", err, tc.wantErr, tc.why)
				}
				if tc.wantErr != ibv.ErrNoGID && (errors.Is(err, ibv.ErrNoGID) || strings.Contains(err.Error(), "RoCEv2")) {
					t.Errorf("chooseLegGID: %v: matches ibv.ErrNoGID or speaks of RoCEv2 for an address on IPoIB", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("chooseLegGID: %v", err)
			}
			if got.Device != tc.wantDev || got.Port != tc.wantPort || got.Index != tc.wantIndex || got.Type != tc.wantType || got.GID.String() != tc.wantGID || got.IPoIB != tc.wantIPoIB {
				t.Errorf("chooseLegGID chose %v (IPoIB %q), want %s port %d index %d %v %s (IPoIB %q)",
					got.GIDEntry, got.IPoIB, tc.wantDev, tc.wantPort, tc.wantIndex, tc.wantType, tc.wantGID, tc.wantIPoIB)
			}
			if got.Reason != tc.why {
				t.Errorf("chooseLegGID reason\n%q\nwant\n%q", got.Reason, tc.why)
			}
		})
	}
}

// TestChooseLegGIDWithoutNetlink: when the IPoIB interfaces cannot be
// listed, a RoCE address is still chosen; any other says both why.
func TestChooseLegGIDWithoutNetlink(t *testing.T) {
	h := ipoib.NewHost(ipoib.Options{Root: os.DirFS(ibSysfs(t)), Netlink: failingNetlink{}})
	got, err := chooseLegGID(&config.Leg{Name: "roce", Kind: config.KindVerbs, IP: netip.MustParseAddr("10.20.0.1")}, ibGIDTable(t), h, "", nil)
	if err != nil || got.Device != "rxe0" || got.Index != 3 {
		t.Errorf("chooseLegGID(10.20.0.1) = %v, %v; want rxe0 index 3", got.GIDEntry, err)
	}
	_, err = chooseLegGID(&config.Leg{Name: "ib", Kind: config.KindVerbs, IP: netip.MustParseAddr("10.10.0.1")}, ibGIDTable(t), h, "", nil)
	if err == nil || errors.Is(err, ibv.ErrNoGID) || !errors.Is(err, errNetlinkDown) ||
		!strings.Contains(err.Error(), "no GID table entry holds this address") || !strings.Contains(err.Error(), "among the IPoIB interfaces") {
		t.Errorf("chooseLegGID(10.10.0.1) without netlink: %v; want both reasons, not ibv.ErrNoGID", err)
	}
}

var errNetlinkDown = errors.New("netlink down")

type failingNetlink struct{}

func (failingNetlink) LinkList() ([]netlink.Link, error) { return nil, errNetlinkDown }
func (failingNetlink) AddrList(netlink.Link, int) ([]netlink.Addr, error) {
	return nil, errNetlinkDown
}
func (failingNetlink) NeighList(int, int) ([]netlink.Neigh, error) { return nil, errNetlinkDown }

// TestChooseLegGIDIWARP: an address on an Ethernet netdev that no GID
// holds is an iWARP device's when that device's GID is the netdev's
// hardware address (siw's, beside the table's rxe); without the address
// it is still ibv.ErrNoGID.
func TestChooseLegGIDIWARP(t *testing.T) {
	h := ipoib.NewHost(ipoib.Options{Root: os.DirFS(ibSysfs(t)), Netlink: ibNetlink(t)})
	mac := net.HardwareAddr{0x52, 0x54, 0, 0xab, 0xcd, 0xef}
	var g ibv.GID
	copy(g[:], mac)
	table := append(ibGIDTable(t), ibv.GIDEntry{Device: "siw0", Port: 1, GID: g, Type: ibv.GIDTypeIB})
	l := &config.Leg{Name: "ib", Kind: config.KindVerbs, IP: netip.MustParseAddr("10.40.0.1")}
	got, err := chooseLegGID(l, table, h, "veth2", mac)
	if err != nil || got.Device != "siw0" || got.Port != 1 || got.Netdev != "veth2" || !strings.HasPrefix(got.Reason, "iWARP: siw0 port 1's GID is veth2's hardware address") {
		t.Errorf("chooseLegGID(10.40.0.1 on veth2) = %+v, %v; want siw0 port 1 on veth2, said iWARP", got, err)
	}
	l.Device = "rxe0"
	if _, err := chooseLegGID(l, table, h, "veth2", mac); !errors.Is(err, ibv.ErrNoGID) {
		t.Errorf("chooseLegGID(10.40.0.1 on veth2, device rxe0): %v; want ibv.ErrNoGID", err)
	}
	l.Device = ""
	if _, err := chooseLegGID(l, table, h, "", nil); !errors.Is(err, ibv.ErrNoGID) {
		t.Errorf("chooseLegGID(10.40.0.1, no netdev found): %v; want ibv.ErrNoGID", err)
	}
}
