package capture_test

import (
	"bufio"
	"flag"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

// testdata/linux-any.pcapng is a capture by the kernel and libpcap, not by
// a test: dumpcap on Linux's "any" device writing Linux cooked v2 headers
// (what tcpdump -i any writes), while a UDP socket sent RoCEv2 packets over
// the loopback device with the ICRC computed for the IP header the kernel
// writes, with ECN and DSCP set; the kernel answered with ICMP port
// unreachable, as nothing listened. go test -run LinuxAny -recapture
// captures it again (as root, with dumpcap).
var recapture = flag.Bool("recapture", false, "capture testdata/linux-any.pcapng again with dumpcap (root)")

const linuxAnyPath = "testdata/linux-any.pcapng"

func TestRecaptureLinuxAny(t *testing.T) {
	if !*recapture {
		t.Skip("-recapture not given: testdata/linux-any.pcapng is kept as it is")
	}
	dumpcap := requireTool(t, "dumpcap", "-v")
	cmd := exec.Command(dumpcap, "-i", "any", "-y", "LINUX_SLL2", "-f", "udp port 4791 or icmp or icmp6",
		"-a", "duration:3", "-w", linuxAnyPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "Capturing on") {
	}
	go func() {
		for sc.Scan() {
		}
	}()
	time.Sleep(200 * time.Millisecond)
	sendRoCE(t, "127.0.0.1", 0x02, roce.RCSendOnly)
	sendRoCE(t, "127.0.0.1", 26<<2|3, roce.RCRDMAWriteOnly)
	sendRoCE(t, "::1", 46<<2|2, roce.UDSendOnly)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// sendRoCE sends a RoCEv2 packet of opcode op from a UDP socket on addr to
// addr:4791 with the TOS (traffic class) tos and the don't-fragment bit,
// which makes Linux write IPv4 ID 0: the ICRC, computed beforehand over the
// headers the kernel will write, is right.
func sendRoCE(t *testing.T, addr string, tos int, op roce.Opcode) {
	t.Helper()
	ip := netip.MustParseAddr(addr)
	network := "udp4"
	if ip.Is6() {
		network = "udp6"
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if ip.Is4() {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
			if serr == nil {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TOS, tos)
			}
		} else {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_TCLASS, tos)
		}
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	src := c.LocalAddr().(*net.UDPAddr).AddrPort()
	dst := netip.AddrPortFrom(ip, roce.Port)
	tr := transport(op)
	pkt := make([]byte, roce.IPUDPLen(ip.Is6()), roce.IPUDPLen(ip.Is6())+len(tr))
	n, err := roce.PutIPUDPHeaders(pkt, src, dst, len(tr), 0)
	if err != nil {
		t.Fatal(err)
	}
	pkt = append(pkt[:n], tr...)
	if err := roce.PutICRC(pkt); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteToUDPAddrPort(pkt[n:], dst); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeLinuxAny decodes the kernel's capture: Linux cooked v2 on the
// loopback device, each RoCEv2 packet with a right ICRC, its ECN and DSCP,
// and the ICMP errors that answered them.
func TestDecodeLinuxAny(t *testing.T) {
	b, err := os.ReadFile(linuxAnyPath)
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := readAll(t, b)
	if err != nil {
		t.Fatal(err)
	}
	var roceN, icmp int
	for i, p := range pkts {
		if p.LinkType != capture.LinkTypeLinuxSLL2 {
			t.Fatalf("packet %d: link type %v", i+1, p.LinkType)
		}
		r := capture.Decode(i+1, p)
		if r.Cooked == nil || r.Cooked.ARPHRD != 772 || r.Cooked.IfIndex == 0 {
			t.Errorf("packet %d: cooked header %+v, want the loopback device (ARPHRD 772)", i+1, r.Cooked)
		}
		switch {
		case r.RoCE:
			roceN++
			if r.Headers == nil || r.ICRCOK == nil || !*r.ICRCOK || r.Error != "" {
				t.Errorf("packet %d: %s", i+1, r.Text())
			}
		case r.IP != nil && (r.IP.Proto == 1 || r.IP.Proto == 58):
			icmp++
		default:
			t.Errorf("packet %d: %s", i+1, r.Text())
		}
	}
	if roceN < 3 || icmp < 3 {
		t.Errorf("%d RoCEv2 packets and %d ICMP errors, want 3 of each at least", roceN, icmp)
	}
}
