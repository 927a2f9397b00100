package integration_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
)

// The tests in this file check the guest the harness promises: run them with
// `make integration`; on the host they skip.

// sysfs reads /sys/class/infiniband/<dev>/<rel>, trimmed.
func sysfs(t *testing.T, dev, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", dev, rel))
	if err != nil {
		t.Fatalf("%s: %v", dev, err)
	}
	return strings.TrimSpace(string(b))
}

func TestGuestDevices(t *testing.T) {
	guest.Device(t)
	for _, tc := range []struct {
		dev, netdev, nodeType string
	}{
		{"rxe0", "veth0", "1: CA"},
		{"rxe1", "br1", "1: CA"},
		{"siw0", "veth2", "4: RNIC"},
		{"siw1", "veth3", "4: RNIC"},
	} {
		t.Run(tc.dev, func(t *testing.T) {
			if got := sysfs(t, tc.dev, "node_type"); got != tc.nodeType {
				t.Errorf("node_type = %q, want %q", got, tc.nodeType)
			}
			if got := sysfs(t, tc.dev, "ports/1/state"); got != "4: ACTIVE" {
				t.Errorf("port 1 state = %q, want 4: ACTIVE", got)
			}
			if got := linkNetdev(t, tc.dev); got != tc.netdev {
				t.Errorf("netdev = %q, want %q", got, tc.netdev)
			}
		})
	}
}

// linkNetdev returns the netdev under an RDMA device's port 1, as the
// kernel's RDMA netlink reports it (siw has no GID attributes in sysfs).
func linkNetdev(t *testing.T, dev string) string {
	t.Helper()
	out, err := exec.Command("rdma", "-j", "link", "show", dev+"/1").Output()
	if err != nil {
		t.Fatalf("rdma link show %s/1: %v", dev, err)
	}
	var links []struct {
		Netdev string `json:"netdev"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("rdma -j link show %s/1: %q: %v", dev, out, err)
	}
	return links[0].Netdev
}

// ipv4Of returns the IPv4 address of a netdev in this namespace.
func ipv4Of(t *testing.T, netdev string) netip.Addr {
	t.Helper()
	ifi, err := net.InterfaceByName(netdev)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Addr()
		}
	}
	t.Fatalf("%s has no IPv4 address", netdev)
	return netip.Addr{}
}

// GID index 1 of an rxe device is the RoCEv2 GID of its netdev's IPv4
// address (::ffff:a.b.c.d); siw's GID 0 starts with its netdev's MAC.
func TestGuestGIDs(t *testing.T) {
	guest.Device(t)
	for _, tc := range []struct{ dev, netdev string }{{"rxe0", "veth0"}, {"rxe1", "br1"}} {
		t.Run(tc.dev, func(t *testing.T) {
			ip := ipv4Of(t, tc.netdev).As4()
			gid := netip.AddrFrom4(ip).As16()
			gid[10], gid[11] = 0xff, 0xff
			want := netip.AddrFrom16(gid).StringExpanded()
			if got := sysfs(t, tc.dev, "ports/1/gids/1"); got != want {
				t.Errorf("GID 1 = %s, want %s (::ffff:%s)", got, want, netip.AddrFrom4(ip))
			}
			if got := sysfs(t, tc.dev, "ports/1/gid_attrs/types/1"); got != "RoCE v2" {
				t.Errorf("GID 1 type = %q, want RoCE v2", got)
			}
		})
	}
	for _, tc := range []struct{ dev, netdev string }{{"siw0", "veth2"}, {"siw1", "veth3"}} {
		t.Run(tc.dev, func(t *testing.T) {
			ifi, err := net.InterfaceByName(tc.netdev)
			if err != nil {
				t.Fatal(err)
			}
			gid := netip.MustParseAddr(sysfs(t, tc.dev, "ports/1/gids/0")).As16()
			if !bytes.Equal(gid[:6], ifi.HardwareAddr) {
				t.Errorf("GID 0 = %x, want it to start with %s's MAC %s", gid, tc.netdev, ifi.HardwareAddr)
			}
		})
	}
}

// The pass's device and its peer sit on netdevs with the addresses the
// environment gives.
func TestGuestPassAddresses(t *testing.T) {
	d := guest.Device(t)
	if got := ipv4Of(t, d.Netdev); got != d.IP {
		t.Errorf("%s (%s) has %s, RBRIDGE_IP says %s", d.Netdev, d.Name, got, d.IP)
	}
	if got := ipv4Of(t, d.PeerNetdev); got != d.PeerIP {
		t.Errorf("%s (%s) has %s, RBRIDGE_PEER_IP says %s", d.PeerNetdev, d.Peer, got, d.PeerIP)
	}
	if got := linkNetdev(t, d.Name); got != d.Netdev {
		t.Errorf("%s is on %s, RBRIDGE_NETDEV says %s", d.Name, got, d.Netdev)
	}
}

// The user namespace can bind UDP 4791 (kernel rxe holds it only in the
// initial namespace) and reaches the initial namespace over its veth: a UDP
// datagram from user0 to the peer's address comes back.
func TestGuestUserNetns(t *testing.T) {
	ns := guest.UserNetns(t)

	if c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: 4791}); err == nil {
		c.Close()
		t.Error("UDP 4791 is free in the initial namespace: is kernel rxe loaded?")
	}

	echo, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ns.PeerIP, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 64)
		n, from, err := echo.ReadFromUDP(buf)
		if err == nil {
			echo.WriteToUDP(buf[:n], from)
		}
	}()

	var roce, conn *net.UDPConn
	err = ns.Do(func() error {
		var err error
		if roce, err = net.ListenUDP("udp4", &net.UDPAddr{IP: ns.IP.AsSlice(), Port: 4791}); err != nil {
			return err
		}
		conn, err = net.DialUDP("udp4", nil, echo.LocalAddr().(*net.UDPAddr))
		return err
	})
	if err != nil {
		t.Fatalf("in netns %s: %v", ns.Name, err)
	}
	defer roce.Close()
	defer conn.Close()
	if got := netip.MustParseAddrPort(conn.LocalAddr().String()).Addr(); got != ns.IP {
		t.Errorf("socket in %s has source %s, want %s", ns.Name, got, ns.IP)
	}
	if _, err := conn.Write([]byte("rbridge")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no echo from %s in the initial namespace: %v", echo.LocalAddr(), err)
	}
	if string(buf[:n]) != "rbridge" {
		t.Errorf("echo = %q, want %q", buf[:n], "rbridge")
	}
}
