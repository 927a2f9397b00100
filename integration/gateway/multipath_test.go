package gateway_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
)

// NVMe multipath through two gateways: a gateway is a single point of
// failure unless the storage protocol above it has two paths. The
// kernel's NVMe-oF host on the IB fabric reaches one target on the RoCE
// side through two rbridge run processes (A on the IB fabric's gateway
// address, B on a second address of the same wire and of user0), each a
// controller of the same subsystem, one multipath namespace. When A is
// killed mid-I/O, the host's path through it fails (the kernel destroys
// A's connections, and its CM disconnects them), the host's multipath
// requeues what was on it through B, and the application sees no error.

// multipathTable is the routing table init.sh forces the IB fabric's
// local traffic over its wire with (see its "table 103" lines).
const multipathTable = "103"

// secondAddress gives netdev (in netns, "" for the test's own) the
// address a as well, until the test ends, and waits until the RDMA
// device on it, if any, has its GID.
func secondAddress(t *testing.T, netns, netdev string, a netip.Addr, bits int, device string) {
	t.Helper()
	ipArgs := func(args ...string) []string {
		if netns == "" {
			return args
		}
		return append([]string{"-n", netns}, args...)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("/usr/sbin/ip", ipArgs(args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(ipArgs(args...), " "), err, out)
		}
	}
	prefix := fmt.Sprintf("%v/%d", a, bits)
	run("addr", "add", prefix, "dev", netdev)
	t.Cleanup(func() { _ = exec.Command("/usr/sbin/ip", ipArgs("addr", "del", prefix, "dev", netdev)...).Run() })
	if device == "" {
		return
	}
	// rxe adds the address's RoCEv2 GID from a netdev event: wait for it.
	want := a.As16()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		gids, _ := filepath.Glob(filepath.Join("/sys/class/infiniband", device, "ports/1/gids/*"))
		for _, g := range gids {
			b, err := os.ReadFile(g)
			if err == nil && strings.TrimSpace(string(b)) == gidString(want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no GID for %v 10 s after the address was added", device, a)
		}
	}
}

// addrPlus is the address n after a.
func addrPlus(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

// gidString writes a GID as sysfs does: eight groups of four hex digits.
func gidString(g [16]byte) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", g[i], g[i+1]))
	}
	return strings.Join(parts, ":")
}

// multipathHead returns the multipath namespace device that the
// controllers ctrls share, and their subsystem's sysfs directory.
func multipathHead(t *testing.T, ctrls ...string) (dev, subsys string) {
	t.Helper()
	b, err := os.ReadFile("/sys/module/nvme_core/parameters/multipath")
	if err != nil || strings.TrimSpace(string(b)) != "Y" {
		t.Fatalf("the guest's nvme_core has no native multipath (parameters/multipath: %q, %v)", b, err)
	}
	head := regexp.MustCompile(`^nvme\d+n\d+$`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		dirs, _ := filepath.Glob("/sys/class/nvme-subsystem/nvme-subsys*")
		for _, d := range dirs {
			all := true
			for _, c := range ctrls {
				if _, err := os.Stat(filepath.Join(d, c)); err != nil {
					all = false
				}
			}
			if !all {
				continue
			}
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				if head.MatchString(e.Name()) {
					if _, err := os.Stat("/dev/" + e.Name()); err == nil {
						return "/dev/" + e.Name(), d
					}
				}
			}
		}
		if time.Now().After(deadline) {
			out, _ := exec.Command("sh", "-c", "ls -l /sys/class/nvme-subsystem/*/ /dev/nvme*").CombinedOutput()
			t.Fatalf("controllers %v share no multipath namespace device:\n%s\n%s", ctrls, out, dmesg("nvme"))
		}
	}
}

// ctrlState is a controller's state as sysfs has it (live, connecting,
// resetting, deleting), or why it cannot be read.
func ctrlState(ctrl string) string {
	b, err := os.ReadFile("/sys/class/nvme/" + ctrl + "/state")
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}

// routeBytes is the payload a gateway's routes carried, both ways.
func routeBytes(t *testing.T, admin string) float64 {
	t.Helper()
	m, _ := scrape(t, admin)
	var n float64
	for k, v := range m {
		if strings.HasPrefix(k, "rbridge_route_payload_bytes_total{") {
			n += v
		}
	}
	return n
}

// TestGuestRunNVMeMultipath: the kernel's NVMe-oF host on the IB fabric
// connects to one target on the RoCE side through two gateways, with
// native multipath and the round-robin I/O policy, so both paths carry
// I/O. While 64 MiB is written and read back, gateway A is killed with
// SIGKILL: the I/O completes through B with no error, and every byte
// verifies. A is started again: the host's controller through it comes
// back to live on its own (the host reconnects every reconnect_delay),
// and the next I/O crosses A again.
func TestGuestRunNVMeMultipath(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	nvmeTarget(t, ns.PeerIP.String())

	// B's addresses: a second on user0's wire and on the IB fabric's
	// gateway side, whose local traffic with the fabric's peer is forced
	// over the wire as init.sh does for the first (a /32 route with its
	// source in its table, a permanent neighbour).
	nsB, ibB := ns, ib
	nsB.IP, ibB.GatewayIP = addrPlus(ns.IP, 10), addrPlus(ib.GatewayIP, 10)
	secondAddress(t, ns.Name, ns.Netdev, nsB.IP, ns.PrefixLen, "")
	secondAddress(t, "", ib.GatewayNetdev, ibB.GatewayIP, ib.PrefixLen, ib.GatewayDevice)
	mac, err := os.ReadFile("/sys/class/net/" + ib.GatewayNetdev + "/address")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"route", "add", ibB.GatewayIP.String() + "/32", "dev", ib.PeerNetdev, "src", ib.PeerIP.String(), "table", multipathTable},
		{"neigh", "replace", ibB.GatewayIP.String(), "lladdr", strings.TrimSpace(string(mac)), "dev", ib.PeerNetdev, "nud", "permanent"},
	} {
		if out, err := exec.Command("/usr/sbin/ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("/usr/sbin/ip", "route", "del", ibB.GatewayIP.String()+"/32", "table", multipathTable).Run()
		_ = exec.Command("/usr/sbin/ip", "neigh", "del", ibB.GatewayIP.String(), "dev", ib.PeerNetdev).Run()
	})

	cfgA := storageConfig("udp", ns, ib, "", "nvme", 4420, 4420)
	cfgB := storageConfig("udp", nsB, ibB, "", "nvme", 4420, 4420)
	dir := t.TempDir()
	logsA, procA := startGatewayAt(t, filepath.Join(dir, "a.yaml"), cfgA)
	logsB, _ := startGatewayAt(t, filepath.Join(dir, "b.yaml"), cfgB)
	adminA, adminB := adminAddr(t, logsA), adminAddr(t, logsB)

	// The host keeps trying a failed path for 5 minutes (every 5 s), long
	// enough for the killed gateway to come back after the I/O.
	ctrlA := nvmeConnectLoss(t, ib.GatewayIP.String(), ib.PeerIP.String(), nvmeNQN, 5*time.Minute)
	ctrlB := nvmeConnectLoss(t, ibB.GatewayIP.String(), ib.PeerIP.String(), nvmeNQN, 5*time.Minute)
	dev, subsys := multipathHead(t, ctrlA, ctrlB)
	if err := os.WriteFile(filepath.Join(subsys, "iopolicy"), []byte("round-robin"), 0o644); err != nil {
		t.Fatalf("set the subsystem's I/O policy to round-robin: %v", err)
	}
	t.Logf("one namespace %s through two gateways: %s through A (%v), %s through B (%v)", dev, ctrlA, ib.GatewayIP, ctrlB, ibB.GatewayIP)

	// 64 MiB written and read back; A dies once it carried 8 MiB.
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- nvmeIOOnce(dev, 64<<20, 64<<20, 7) }()
	var killedAt time.Duration
	for deadline := time.Now().Add(3 * time.Minute); killedAt == 0; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the I/O ended (%v) before gateway A carried 8 MiB (%.0f bytes)", err, routeBytes(t, adminA))
		default:
		}
		if routeBytes(t, adminA) >= 8<<20 {
			killGateway(t, procA)
			killedAt = time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway A carried %.0f bytes in 3 minutes, not 8 MiB", routeBytes(t, adminA))
		}
	}
	bBefore := routeBytes(t, adminB)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the application saw an error after gateway A was killed: %v\n%s", err, dmesg("nvme"))
		}
	case <-time.After(6 * time.Minute):
		t.Fatalf("I/O on %s did not end within 6 minutes of gateway A's death\n%s", dev, dmesg("nvme"))
	}
	t.Logf("64 MiB written and read back in %v; gateway A was killed %v in, after which B carried the rest (%.0f bytes through B by then)",
		time.Since(start).Round(time.Millisecond), killedAt.Round(time.Millisecond), bBefore)
	if st := ctrlState(ctrlA); st == "live" {
		t.Errorf("%s (through the killed gateway) is %s", ctrlA, st)
	}
	if st := ctrlState(ctrlB); st != "live" {
		t.Errorf("%s (through B) is %s, want live", ctrlB, st)
	}

	// A again: the host reconnects to it by itself.
	logsA2, _ := startGatewayAt(t, filepath.Join(dir, "a2.yaml"), cfgA)
	adminA2 := adminAddr(t, logsA2)
	back := time.Now()
	for deadline := back.Add(90 * time.Second); ctrlState(ctrlA) != "live"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s 90 s after gateway A came back\n%s", ctrlA, ctrlState(ctrlA), dmesg("nvme"))
		}
	}
	t.Logf("%s live again %v after gateway A restarted", ctrlA, time.Since(back).Round(time.Millisecond))
	if err := nvmeIOOnce(dev, 8<<20, 8<<20, 8); err != nil {
		t.Fatalf("I/O after A came back: %v\n%s", err, dmesg("nvme"))
	}
	if n := routeBytes(t, adminA2); n == 0 {
		t.Errorf("the I/O after A came back did not cross it (round-robin over two live paths)")
	}
	nvmeDisconnect(t, ctrlA)
	nvmeDisconnect(t, ctrlB)
	for name, logs := range map[string]*syncBuffer{"B": logsB, "A restarted": logsA2} {
		if strings.Contains(logs.String(), "session failed") {
			t.Errorf("a session of gateway %s failed:\n%s", name, lastLines(logs.String(), 40))
		}
	}
}
