package ipoib_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
)

// TestInterfaceWith: the lookup a verbs leg's address goes through, the
// IPoIB interface that holds an address, with its RDMA port as package ibv
// takes it: on each port of the dual-port mlx4 tree, on a P_Key child of
// the mlx5 tree (its parent's port), and on an interface without a device
// link whose port nothing else finds (why, from its notes).
func TestInterfaceWith(t *testing.T) {
	mlx4 := ipoib.NewHost(ipoib.Options{Root: os.DirFS("testdata/mlx4"), Netlink: &fakeNetlink{
		links: append(otherLinks(t),
			ipoibLink(t, 6, 0, "ib0", "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1", 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED),
			ipoibLink(t, 7, 0, "ib1", "80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2", 2044, 0xffff, netlink.IPOIB_MODE_DATAGRAM)),
		addrs: map[int][]netlink.Addr{6: {addr(t, "10.10.0.1/24"), addr(t, "fe80::f652:1403:7b:e1b1/64")}, 7: {addr(t, "10.10.1.1/24")}},
	}})
	mlx5 := ipoib.NewHost(ipoib.Options{Root: os.DirFS("testdata/mlx5"), Netlink: &fakeNetlink{
		links: append(otherLinks(t),
			ipoibLink(t, 4, 0, "ib0", "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0xffff, 0),
			ipoibLink(t, 5, 4, "ib0.8001", "00:00:10:88:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0x8001, 0)),
		addrs: map[int][]netlink.Addr{4: {addr(t, "10.0.0.1/24")}, 5: {addr(t, "10.1.0.1/24")}},
	}})
	// ib0 of the odd tree has no device link; its address carries a GID
	// no port has at index 0.
	odd := ipoib.NewHost(ipoib.Options{Root: os.DirFS("testdata/odd"), Netlink: &fakeNetlink{
		links: append(otherLinks(t), ipoibLink(t, 10, 0, "ib0", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:99:99", 2044, 0xffff, 0)),
		addrs: map[int][]netlink.Addr{10: {addr(t, "10.9.0.1/24")}},
	}})
	for _, tc := range []struct {
		name string
		h    *ipoib.Host
		ip   string
		want ibv.IPoIBPort
	}{
		{"port 1", mlx4, "10.10.0.1", ibv.IPoIBPort{Netdev: "ib0", Device: "mlx4_0", Port: 1}},
		{"port 2 (dev_id)", mlx4, "10.10.1.1", ibv.IPoIBPort{Netdev: "ib1", Device: "mlx4_0", Port: 2}},
		{"IPv4-mapped", mlx4, "::ffff:10.10.1.1", ibv.IPoIBPort{Netdev: "ib1", Device: "mlx4_0", Port: 2}},
		{"link-local with its zone", mlx4, "fe80::f652:1403:7b:e1b1%ib0", ibv.IPoIBPort{Netdev: "ib0", Device: "mlx4_0", Port: 1}},
		{"P_Key child", mlx5, "10.1.0.1", ibv.IPoIBPort{Netdev: "ib0.8001", Device: "mlx5_0", Port: 1}},
		{"no device link", odd, "10.9.0.1", ibv.IPoIBPort{Netdev: "ib0",
			Unknown: "no RDMA device: read /sys/class/net/ib0/device/infiniband: no such file or directory; no RDMA port has GID 0 fe80::2:c903:a:9999: looked at the ports of 2 RDMA devices"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ifc, err := tc.h.InterfaceWith(netip.MustParseAddr(tc.ip))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ifc.RDMAPort()); diff != "" {
				t.Errorf("InterfaceWith(%s).RDMAPort() (-want +got):\n%s", tc.ip, diff)
			}
		})
	}
	for _, ip := range []string{"10.10.2.1", "fe80::f652:1403:7b:e1b1%ib1"} {
		_, err := mlx4.InterfaceWith(netip.MustParseAddr(ip))
		if !errors.Is(err, ipoib.ErrNoInterface) {
			t.Errorf("InterfaceWith(%s) = %v, want ErrNoInterface", ip, err)
		}
	}
}

// TestWithAddrTwice: an address on two interfaces names both.
func TestWithAddrTwice(t *testing.T) {
	ifs := []ipoib.Interface{
		{Name: "ib0", Addrs: prefixes("10.0.0.1/24")},
		{Name: "ib1", Addrs: prefixes("10.0.0.1/24")},
	}
	_, err := ipoib.WithAddr(ifs, netip.MustParseAddr("10.0.0.1"))
	if err == nil || !strings.Contains(err.Error(), "2 hold it: [ib0 ib1]") {
		t.Errorf("WithAddr = %v, want an error naming ib0 and ib1", err)
	}
}

// TestPortOf: the port of an interface from sysfs alone (no netlink, as
// rbridge doctor reads a captured tree): dev_port, dev_id on older
// kernels, a P_Key child's parent's; an interface without a device link
// is ErrNoPort, saying what is missing.
func TestPortOf(t *testing.T) {
	for _, tc := range []struct {
		root, name string
		dev        string
		port       int
		err        string
	}{
		{root: "testdata/mlx4", name: "ib0", dev: "mlx4_0", port: 1},
		{root: "testdata/mlx4", name: "ib1", dev: "mlx4_0", port: 2},
		{root: "testdata/mlx5", name: "ib0", dev: "mlx5_0", port: 1},
		{root: "testdata/mlx5", name: "ib0.8001", dev: "mlx5_0", port: 1},
		{root: "testdata/odd", name: "ib0", err: "ipoib interface ib0: RDMA port unknown: no RDMA device: read /sys/class/net/ib0/device/infiniband: no such file or directory"},
		{root: "testdata/odd", name: "ib3.8002", err: "ipoib interface ib3.8002 (P_Key child of ib3): RDMA port unknown: no RDMA device: read /sys/class/net/ib3/device/infiniband"},
		{root: "testdata/mlx4", name: "ib7", err: "ipoib interface ib7: RDMA port unknown: no RDMA device"},
	} {
		dev, port, err := ipoib.PortOf(os.DirFS(tc.root), tc.name)
		if tc.err != "" {
			if !errors.Is(err, ipoib.ErrNoPort) || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("PortOf(%s %s) = %s %d, %v; want ErrNoPort, %q", tc.root, tc.name, dev, port, err, tc.err)
			}
			continue
		}
		if err != nil || dev != tc.dev || port != tc.port {
			t.Errorf("PortOf(%s %s) = %s %d, %v; want %s %d", tc.root, tc.name, dev, port, err, tc.dev, tc.port)
		}
	}
}
