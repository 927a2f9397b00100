//go:build linux

package igmp_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/igmp"
	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
)

// TestConnKernel: the Linux kernel as the host, the peer nobody here
// wrote. A veth joins two network namespaces: in the host's, a socket
// joins and leaves a group (the kernel sends the reports, of the version
// the interface is forced to); in the router's, a Conn hears them, and
// sends the table's queries, which the host's kernel answers. The bytes
// the kernel sent are logged (vectors for the parser).
func TestConnKernel(t *testing.T) {
	for _, tc := range []struct {
		v6      bool
		version int
	}{{false, 3}, {false, 2}, {true, 2}, {true, 1}} {
		name := fmt.Sprintf("IGMPv%d", tc.version)
		if tc.v6 {
			name = fmt.Sprintf("MLDv%d", tc.version)
		}
		t.Run(name, func(t *testing.T) { testConnKernel(t, tc.v6, tc.version) })
	}
}

// testConnKernel is TestConnKernel for one version of IGMP (v6 false) or
// MLD; full says the version with group records (IGMPv3, MLDv2).
func testConnKernel(t *testing.T, v6 bool, version int) {
	full := version == 3 || v6 && version == 2
	needs.Root(t, "network namespaces, AF_PACKET sockets")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	tag := fmt.Sprintf("%d%d%d", os.Getpid()%100000, version, map[bool]int{false: 4, true: 6}[v6])
	rtNS, hostNS, rtIf, hostIf := "rbq"+tag+"r", "rbq"+tag+"h", "rbq"+tag+"r", "rbq"+tag+"h"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{rtNS, hostNS} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip("-n", rtNS, "link", "add", rtIf, "type", "veth", "peer", "name", hostIf, "netns", hostNS)
	sysctl := func(ns, path, v string) {
		t.Helper()
		if err := netns.Do(ns, func() error { return os.WriteFile("/proc/sys/net/"+path, []byte(v), 0) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct{ ns, ifc, addr string }{{rtNS, rtIf, "10.98.0.1/24"}, {hostNS, hostIf, "10.98.0.2/24"}} {
		// No DAD: a tentative link-local address would make the host
		// report from :: and the router's queries unsendable.
		sysctl(s.ns, "ipv6/conf/"+s.ifc+"/accept_dad", "0")
		ip("-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ip("-n", s.ns, "link", "set", s.ifc, "up")
	}
	if v6 {
		sysctl(hostNS, "ipv6/conf/"+hostIf+"/force_mld_version", fmt.Sprint(version))
	} else {
		sysctl(hostNS, "ipv4/conf/"+hostIf+"/force_igmp_version", fmt.Sprint(version))
	}
	// linkLocal waits for ifname's link-local address (the kernel adds
	// it once the link has carrier).
	linkLocal := func(ns, ifname string) netip.Addr {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var a netip.Addr
			err := netns.Do(ns, func() error {
				ifi, err := net.InterfaceByName(ifname)
				if err != nil {
					return err
				}
				as, err := ifi.Addrs()
				for _, x := range as {
					if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
						a = p.Addr()
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if a.IsValid() {
				return a
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s has no link-local address after 5 s", ifname)
			}
		}
	}
	var c *igmp.Conn
	if err := netns.Do(rtNS, func() error {
		var err error
		c, err = igmp.Listen(rtIf, v6)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pkts := make(chan igmp.Packet, 16)
	go func() {
		defer close(pkts)
		buf := make([]byte, 1500)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			p, err := igmp.ParsePacket(buf[:n])
			if err != nil {
				t.Errorf("the kernel's packet %x: %v", buf[:n], err)
				continue
			}
			t.Logf("heard from %v to %v: %x", p.Src, p.Dst, buf[:n])
			pkts <- p
		}
	}()
	host, router := netip.MustParseAddr("10.98.0.2"), netip.MustParseAddr("10.98.0.1")
	group := netip.AddrFrom4([4]byte{239, 77, byte(os.Getpid() >> 8), byte(os.Getpid())})
	if v6 {
		host, router = linkLocal(hostNS, hostIf), linkLocal(rtNS, rtIf)
		group = netip.AddrFrom16([16]byte{0xff, 0x05, 15: 0x77, 14: byte(os.Getpid()), 13: byte(os.Getpid() >> 8)})
	}
	// expect waits for a message from the host about group that match
	// says is the one.
	expect := func(what string, within time.Duration, match func(igmp.Message) bool) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case p, ok := <-pkts:
				if !ok {
					t.Fatalf("%s: the Conn stopped reading", what)
				}
				if match(p.Message) { // the host's others (its solicited-node group's, from :: at first) are skipped
					if p.Src != host || p.TTL != 1 {
						t.Errorf("%s: from %v with TTL %d, want the host's (%v) with TTL 1", what, p.Src, p.TTL, host)
					}
					return
				}
			case <-deadline:
				t.Fatalf("%s: not heard within %v", what, within)
			}
		}
	}
	joined := func(m igmp.Message) bool {
		if !full {
			return m.Type == igmp.TypeReportV2 && m.Group == group
		}
		for _, r := range m.Records {
			if r.Group == group && (r.Type == igmp.ChangeToExcludeMode || r.Type == igmp.ModeIsExclude) && r.Sources == 0 {
				return true
			}
		}
		return false
	}

	var fd int
	if err := netns.Do(hostNS, func() error {
		ifi, err := net.InterfaceByName(hostIf)
		if err != nil {
			return err
		}
		if v6 {
			if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM, 0); err != nil {
				return err
			}
			return unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifi.Index)})
		}
		if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return err
		}
		return unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifi.Index)})
	}); err != nil {
		t.Fatal(err)
	}
	expect("the join's report", 5*time.Second, joined)

	tb := igmp.NewTable(igmp.Options{Addr: router}, time.Now())
	general := netip.IPv4Unspecified()
	if v6 {
		general = netip.IPv6Unspecified()
	}
	for _, q := range []igmp.Query{{Group: general, MaxResp: time.Second}, {Group: group, MaxResp: time.Second}} {
		if err := c.WriteTo(tb.AppendQuery(nil, q), q.Dst()); err != nil {
			t.Fatal(err)
		}
		expect(fmt.Sprintf("the answer to our query %+v", q), 3*time.Second, joined)
	}

	unix.Close(fd)
	expect("the leave", 5*time.Second, func(m igmp.Message) bool {
		if !full {
			return m.Type == igmp.TypeLeave && m.Group == group
		}
		for _, r := range m.Records {
			if r.Group == group && r.Type == igmp.ChangeToIncludeMode && r.Sources == 0 {
				return true
			}
		}
		return false
	})
}
