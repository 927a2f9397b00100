package doctor_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/doctor"
)

// ibTree writes the sysfs of a host with a dual-port InfiniBand HCA,
// mlx4_0, and its IPoIB interfaces as Linux lays them out (ipoib_main.c's
// ipoib_parent_init: the netdev's device is the HCA's PCI function,
// dev_port the port less one): ib0 on port 1, ib1 on port 2, and ib2 with
// no device link; eth0 is Ethernet.
func ibTree(t *testing.T) string {
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
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	hca := "sys/devices/pci0000:00/0000:04:00.0/infiniband/mlx4_0"
	w(hca+"/node_type", "1: CA")
	link("sys/class/infiniband/mlx4_0", "../../devices/pci0000:00/0000:04:00.0/infiniband/mlx4_0")
	for port, guid := range map[int]string{1: "e1b1", 2: "e1b2"} {
		p := fmt.Sprintf("%s/ports/%d", hca, port)
		w(p+"/link_layer", "InfiniBand")
		w(p+"/state", "4: ACTIVE")
		w(p+"/gids/0", "fe80:0000:0000:0000:f452:1403:007b:"+guid)
		w(p+"/gid_attrs/types/0", "IB/RoCE v1")
	}
	for i, n := range []string{"ib0", "ib1", "ib2"} {
		w("sys/class/net/"+n+"/type", "32")
		w("sys/class/net/"+n+"/mode", "datagram")
		w("sys/class/net/"+n+"/mtu", "2044")
		if n != "ib2" {
			w("sys/class/net/"+n+"/dev_port", fmt.Sprint(i))
			link("sys/class/net/"+n+"/device", "../../../devices/pci0000:00/0000:04:00.0")
		}
	}
	w("sys/class/net/eth0/type", "1")
	w("sys/class/net/eth0/mtu", "1500")
	return root
}

// TestVerbsLegOnIPoIB: doctor finds a verbs leg whose ip is on an IPoIB
// interface on that interface's port, as rbridge run does, names the
// interface in the port's GID finding, and leaves the Ethernet checks off
// it; a leg naming another port, or on an interface whose port is not
// known, is an error that says so.
func TestVerbsLegOnIPoIB(t *testing.T) {
	sys := fakeSystem{addrs: map[string][]netip.Addr{
		"ib0":  {netip.MustParseAddr("10.10.0.1")},
		"ib1":  {netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("fe80::f652:1403:7b:e1b2")},
		"ib2":  {netip.MustParseAddr("10.10.2.1")},
		"eth0": {netip.MustParseAddr("10.20.0.1")},
	}}
	for _, tc := range []struct {
		name, leg string
		subj      string
		sev       doctor.Severity
		finding   string
	}{
		{"port 1", "ip: 10.10.0.1", "mlx4_0/1", doctor.OK,
			"InfiniBand GID index 0 fe80::f452:1403:7b:e1b1: 10.10.0.1 is on IPoIB interface ib0, on this port; the leg uses its GID index 0"},
		{"port 2", "ip: 10.10.1.1", "mlx4_0/2", doctor.OK,
			"InfiniBand GID index 0 fe80::f452:1403:7b:e1b2: 10.10.1.1 is on IPoIB interface ib1, on this port; the leg uses its GID index 0"},
		{"port 2, named", "ip: 10.10.1.1, device: mlx4_0, port: 2", "mlx4_0/2", doctor.OK,
			"InfiniBand GID index 0 fe80::f452:1403:7b:e1b2: 10.10.1.1 is on IPoIB interface ib1, on this port"},
		{"another port named", "ip: 10.10.1.1, device: mlx4_0, port: 1", "leg ib", doctor.Error,
			"10.10.1.1 is on IPoIB interface ib1, on mlx4_0 port 2, not on the leg's device mlx4_0 port 1"},
		{"no device link", "ip: 10.10.2.1", "leg ib", doctor.Error,
			"10.10.2.1 is on IPoIB interface ib2, whose RDMA port is not known: ipoib interface ib2: RDMA port unknown: no RDMA device: read /sys/class/net/ib2/device/infiniband"},
		{"on eth0, no RDMA device there", "ip: 10.20.0.1", "leg ib", doctor.Error, "no GID of any RDMA device holds 10.20.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fmt.Sprintf(`legs:
  - {name: ib, kind: verbs, %s}
  - {name: roce, kind: userspace, interface: eth0, ip: 10.20.0.1, io: udp}
routes:
  - name: r
    listen: {leg: roce, addr: "10.20.0.1:7471"}
    target: {leg: ib, addr: "10.10.0.9:7471"}
`, tc.leg)
			r := run(t, "", cfg, doctor.Options{Root: ibTree(t), System: sys})
			fs := find(r, "gid", tc.subj)
			if len(fs) != 1 || fs[0].Severity != tc.sev || fs[0].Leg != "ib" || !strings.HasPrefix(fs[0].Message, tc.finding) {
				t.Errorf("gid on %s: got\n%s want %v %q", tc.subj, dump(fs), tc.sev, tc.finding)
			}
			for _, check := range []string{"pfc", "mtu", "rp_filter"} {
				for _, n := range []string{"ib0", "ib1", "ib2"} {
					if fs := find(r, check, n); len(fs) != 0 {
						t.Errorf("%s on IPoIB interface %s, an Ethernet check:\n%s", check, n, dump(fs))
					}
				}
			}
		})
	}
}
