package ipoib_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce"
)

// equateAddrs compares netip values by ==.
var equateAddrs = cmpopts.EquateComparable(netip.Addr{}, netip.Prefix{})

// portMTUs stands for what package ibv reports as each port's active MTU.
func portMTUs(m map[string]roce.MTU) func(string, int) roce.MTU {
	return func(dev string, port int) roce.MTU { return m[dev+"/"+string(rune('0'+port))] }
}

func prefixes(ss ...string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestInterfaces runs discovery over each crafted sysfs tree in testdata
// (testdata/mkfixtures.sh) with the netlink links such a machine has.
func TestInterfaces(t *testing.T) {
	const (
		mlx5Addr   = "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56"
		mlx5Child  = "00:00:10:88:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56"
		mlx4Port1  = "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1"
		mlx4Port2  = "80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2"
		oddByGID   = "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a"
		oddBadGID  = "80:00:00:49:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5b"
		oddChild   = "80:00:00:50:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5c"
		upState    = "up"
		datagram   = ipoib.ModeDatagram
		connected  = ipoib.ModeConnected
		defaultKey = ipoib.DefaultPKey
	)
	for _, tc := range []struct {
		name    string
		root    string
		links   []netlink.Link
		addrs   map[int][]netlink.Addr
		portMTU map[string]roce.MTU
		want    []ipoib.Interface
	}{{
		name: "mlx5 enhanced IPoIB and a P_Key child",
		root: "testdata/mlx5",
		links: append(otherLinks(t),
			ipoibLink(t, 4, 0, "ib0", mlx5Addr, 4092, 0xffff, netlink.IPOIB_MODE_DATAGRAM),
			ipoibLink(t, 5, 4, "ib0.8001", mlx5Child, 4092, 0x8001, netlink.IPOIB_MODE_DATAGRAM)),
		addrs: map[int][]netlink.Addr{
			4: {addr(t, "10.0.0.1/24"), addr(t, "fe80::bace:f603:12:3456/64")},
			5: {addr(t, "10.1.0.1/24")},
		},
		portMTU: map[string]roce.MTU{"mlx5_0/1": roce.MTU4096},
		want: []ipoib.Interface{{
			Name: "ib0", Index: 4, MTU: 4092, OperState: upState, Addrs: prefixes("10.0.0.1/24", "fe80::bace:f603:12:3456/64"),
			HwAddr: hw(t, mlx5Addr), GID: gid(t, "fe80::b8ce:f603:12:3456"), QPN: 0x1087,
			Mode: datagram, PKey: defaultKey, Device: "mlx5_0", Port: 1,
			IBMTU: roce.MTU4096, MaxMTU: ipoib.MTULimits{Datagram: 4092},
		}, {
			Name: "ib0.8001", Index: 5, MTU: 4092, OperState: upState, Addrs: prefixes("10.1.0.1/24"),
			HwAddr: hw(t, mlx5Child), GID: gid(t, "fe80::b8ce:f603:12:3456"), QPN: 0x1088,
			Mode: datagram, PKey: 0x8001, Parent: "ib0", Device: "mlx5_0", Port: 1,
			IBMTU: roce.MTU4096, MaxMTU: ipoib.MTULimits{Datagram: 4092},
		}},
	}, {
		name: "mlx4 dual port, connected and datagram, dev_id",
		root: "testdata/mlx4",
		links: append(otherLinks(t),
			ipoibLink(t, 7, 0, "ib1", mlx4Port2, 2044, 0xffff, netlink.IPOIB_MODE_DATAGRAM),
			ipoibLink(t, 6, 0, "ib0", mlx4Port1, 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED)),
		portMTU: map[string]roce.MTU{"mlx4_0/1": roce.MTU2048, "mlx4_0/2": roce.MTU4096},
		want: []ipoib.Interface{{
			Name: "ib0", Index: 6, MTU: 65520, OperState: upState, Addrs: prefixes(),
			HwAddr: hw(t, mlx4Port1), GID: gid(t, "fe80::f452:1403:7b:e1b1"), QPN: 0x0a28, Flags: ipoib.FlagRC,
			Mode: connected, PKey: defaultKey, Device: "mlx4_0", Port: 1,
			IBMTU: roce.MTU2048, MaxMTU: ipoib.MTULimits{Datagram: 2044, Connected: 65520},
		}, {
			Name: "ib1", Index: 7, MTU: 2044, OperState: upState, Addrs: prefixes(),
			HwAddr: hw(t, mlx4Port2), GID: gid(t, "fe80::f452:1403:7b:e1b2"), QPN: 0x0a29, Flags: ipoib.FlagRC,
			Mode: datagram, Umcast: true, PKey: defaultKey, Device: "mlx4_0", Port: 2,
			IBMTU: roce.MTU4096, MaxMTU: ipoib.MTULimits{Datagram: 4092, Connected: 65520},
		}},
	}, {
		name: "what does not add up",
		root: "testdata/odd",
		links: append(otherLinks(t),
			ipoibLink(t, 10, 0, "ib0", oddByGID, 2044, 0xffff, netlink.IPOIB_MODE_DATAGRAM),
			ipoibLink(t, 11, 0, "ib1", oddBadGID, 2044, 0x7fff, netlink.IPOIB_MODE_DATAGRAM),
			// A tun device set to ARPHRD_INFINIBAND (TUNSETLINK): no address, no ipoib files.
			&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Index: 12, Name: "ib2", MTU: 1500, EncapType: ipoib.EncapInfiniband, OperState: netlink.OperDown}},
			ipoibLink(t, 13, 0, "ib3.8002", oddChild, 2044, 0x8002, netlink.IPOIB_MODE_DATAGRAM)),
		want: []ipoib.Interface{{
			Name: "ib0", Index: 10, MTU: 2044, OperState: upState, Addrs: prefixes(),
			HwAddr: hw(t, oddByGID), GID: gid(t, "fe80::2:c903:a:1e5a"), QPN: 0x48, Flags: ipoib.FlagRC,
			Mode: datagram, PKey: defaultKey, Device: "mlx5_3", Port: 1,
			MaxMTU: ipoib.MTULimits{Connected: 65520},
			Notes: []string{
				"no RDMA device: read /sys/class/net/ib0/device/infiniband: no such file or directory",
				"mlx5_3 port 1 found by its GID 0, the interface's",
			},
		}, {
			Name: "ib1", Index: 11, MTU: 2044, OperState: upState, Addrs: prefixes(),
			HwAddr: hw(t, oddBadGID), GID: gid(t, "fe80::2:c903:a:1e5b"), QPN: 0x49, Flags: ipoib.FlagRC,
			Mode: datagram, PKey: 0x7fff, Device: "mlx5_4", Port: 1,
			MaxMTU: ipoib.MTULimits{Connected: 65520},
			Notes:  []string{"GID 0 of mlx5_4 port 1 is fe80::2:c903:a:ffff, the interface's address carries fe80::2:c903:a:1e5b"},
		}, {
			Name: "ib2", Index: 12, MTU: 1500, OperState: "down", Addrs: prefixes(),
			Notes: []string{
				"hardware address is 0 bytes, not the 20 of an IPoIB address: not an ipoib driver's interface?",
				"mode unknown: read /sys/class/net/ib2/mode: no such file or directory",
				"umcast unknown: read /sys/class/net/ib2/umcast: no such file or directory",
				"P_Key unknown: read /sys/class/net/ib2/pkey: no such file or directory",
				"no RDMA device: read /sys/class/net/ib2/device/infiniband: no such file or directory",
			},
		}, {
			Name: "ib3.8002", Index: 13, MTU: 2044, OperState: upState, Addrs: prefixes(),
			HwAddr: hw(t, oddChild), GID: gid(t, "fe80::2:c903:a:1e5c"), QPN: 0x50, Flags: ipoib.FlagRC,
			Mode: datagram, PKey: 0x8002, Parent: "ib3",
			MaxMTU: ipoib.MTULimits{Connected: 65520},
			Notes:  []string{"parent ib3 is not a port's IPoIB interface"},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			nl := &fakeNetlink{links: tc.links, addrs: tc.addrs}
			h := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: os.DirFS(tc.root), PortMTU: portMTUs(tc.portMTU)})
			got, err := h.Interfaces()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, equateAddrs); diff != "" {
				t.Errorf("Interfaces (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInterfacesNetlinkOnly: without sysfs (another mount namespace's, or
// none), mode, umcast and P_Key come from the ipoib link kind's netlink
// data and a child's parent from IFLA_LINK.
func TestInterfacesNetlinkOnly(t *testing.T) {
	parent := ipoibLink(t, 4, 0, "ib0", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a", 65520, 0xffff, netlink.IPOIB_MODE_CONNECTED)
	parent.Umcast = 1
	child := ipoibLink(t, 9, 4, "ib0.8001", "80:00:00:49:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a", 2044, 0x8001, netlink.IPOIB_MODE_DATAGRAM)
	h := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{links: []netlink.Link{child, parent}}, Root: fstest.MapFS{}})
	got, err := h.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Name   string
		Mode   ipoib.Mode
		Umcast bool
		PKey   ipoib.PKey
		Parent string
		Notes  int
	}
	var sums []summary
	for _, ifc := range got {
		sums = append(sums, summary{ifc.Name, ifc.Mode, ifc.Umcast, ifc.PKey, ifc.Parent, len(ifc.Notes)})
	}
	want := []summary{
		// The parent: no device link, no infiniband class to search by GID.
		{"ib0", ipoib.ModeConnected, true, 0xffff, "", 2},
		// The child is resolved to its parent, whose port is unknown too.
		{"ib0.8001", ipoib.ModeDatagram, false, 0x8001, "ib0", 0},
	}
	if diff := cmp.Diff(want, sums); diff != "" {
		t.Errorf("Interfaces without sysfs (-want +got):\n%s", diff)
	}
}

func TestInterfacesNone(t *testing.T) {
	h := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{links: otherLinks(t)}, Root: fstest.MapFS{}})
	got, err := h.Interfaces()
	if err != nil || len(got) != 0 {
		t.Errorf("Interfaces on a machine without IPoIB = %v, %v; want none, no error", got, err)
	}
	_, err = h.InterfaceFor("mlx5_0", 1)
	if !errors.Is(err, ipoib.ErrNoInterface) || !strings.Contains(err.Error(), "the machine has none") {
		t.Errorf("InterfaceFor = %v, want ErrNoInterface saying there are none", err)
	}
}

func TestInterfacesDumpErrors(t *testing.T) {
	boom := errors.New("netlink: permission denied")
	h := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{linkErr: boom}, Root: fstest.MapFS{}})
	if _, err := h.Interfaces(); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "list ipoib interfaces: ") {
		t.Errorf("Interfaces with a failing dump = %v, want it wrapped", err)
	}
	// An interrupted dump is retried; the answer is the full one.
	links := append(otherLinks(t), ipoibLink(t, 4, 0, "ib0", "80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a", 2044, 0xffff, 0))
	nl := &fakeNetlink{links: links, interrupted: 2}
	got, err := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: fstest.MapFS{}}).Interfaces()
	if err != nil || len(got) != 1 || nl.dumps != 3 {
		t.Errorf("after 2 interrupted dumps: %d interfaces, %v, %d dumps; want 1, nil, 3", len(got), err, nl.dumps)
	}
	nl = &fakeNetlink{links: links, interrupted: 5}
	if _, err := ipoib.NewHost(ipoib.Options{Netlink: nl, Root: fstest.MapFS{}}).Interfaces(); !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Errorf("always interrupted: %v, want ErrDumpInterrupted", err)
	}
}

// TestInterfaceFor: the lookup the IP fallback uses, the interface of an
// RDMA device's port, never a P_Key child.
func TestInterfaceFor(t *testing.T) {
	links := append(otherLinks(t),
		ipoibLink(t, 5, 4, "ib0.8001", "00:00:10:88:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0x8001, 0),
		ipoibLink(t, 4, 0, "ib0", "00:00:10:87:fe:80:00:00:00:00:00:00:b8:ce:f6:03:00:12:34:56", 4092, 0xffff, 0))
	h := ipoib.NewHost(ipoib.Options{Netlink: &fakeNetlink{links: links}, Root: os.DirFS("testdata/mlx5")})
	ifc, err := h.InterfaceFor("mlx5_0", 1)
	if err != nil || ifc.Name != "ib0" {
		t.Errorf("InterfaceFor(mlx5_0, 1) = %q, %v; want ib0", ifc.Name, err)
	}
	for _, q := range []struct {
		dev  string
		port int
	}{{"mlx5_0", 2}, {"mlx5_1", 1}} {
		_, err := h.InterfaceFor(q.dev, q.port)
		if !errors.Is(err, ipoib.ErrNoInterface) || !strings.Contains(err.Error(), "ib0 (mlx5_0 port 1)") {
			t.Errorf("InterfaceFor(%s, %d) = %v; want ErrNoInterface naming what there is", q.dev, q.port, err)
		}
	}
}
