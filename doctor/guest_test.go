package doctor_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// In the guest, rbridge doctor runs for real against the kernel's rxe and
// siw devices on veth pairs, and its findings must be the guest's real
// state: veth exposes neither DCB nor ECN for RoCE, rxe's IPv4 GID is a
// RoCEv2 one at index 1, siw is iWARP, the sysctls are what init.sh set.

// doctorOut is rbridge doctor --json's output.
type doctorOut struct {
	Findings []struct {
		Check    string `json:"check"`
		Subject  string `json:"subject"`
		Leg      string `json:"leg"`
		Severity string `json:"severity"`
		Finding  string `json:"finding"`
		Fix      string `json:"fix"`
	} `json:"findings"`
	Worst string `json:"worst"`
}

// runDoctor runs the binary (under ip netns exec when netns is given) and
// checks that its exit status is the one its worst finding calls for.
func runDoctor(t *testing.T, netns string, args ...string) doctorOut {
	t.Helper()
	bin := guest.Rbridge(t)
	argv := append([]string{bin, "doctor", "--json", "--interval", "300ms"}, args...)
	if netns != "" {
		argv = append([]string{"/usr/sbin/ip", "netns", "exec", netns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	var d doctorOut
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("%v: exit %d, output not JSON (%v):\n%s\nstderr:\n%s", argv, code, err, out, stderr.String())
	}
	if want := map[string]int{"ok": 0, "warn": 1, "error": 2}[d.Worst]; code != want {
		t.Errorf("%v: exit status %d, want %d for worst %q", argv, code, want, d.Worst)
	}
	for _, f := range d.Findings {
		t.Logf("%-5s %-12s %-10s %s | %s", f.Severity, f.Check, f.Subject, f.Finding, f.Fix)
	}
	return d
}

// expect fails unless a finding of check on subject has the severity and
// holds every one of the substrings.
func (d doctorOut) expect(t *testing.T, check, subject, severity string, substrings ...string) {
	t.Helper()
	var seen []string
	for _, f := range d.Findings {
		if f.Check != check || f.Subject != subject {
			continue
		}
		ok := f.Severity == severity
		for _, s := range substrings {
			ok = ok && strings.Contains(f.Finding, s)
		}
		if ok {
			return
		}
		seen = append(seen, fmt.Sprintf("%s %q", f.Severity, f.Finding))
	}
	t.Errorf("no %s finding %s on %s with %q; saw %v", severity, check, subject, substrings, seen)
}

func readSys(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the guest lacks %s: %v", path, err)
	}
	return strings.TrimSpace(string(b))
}

// TestGuestDoctorAllDevices: without a config, doctor checks every device
// and interface: this pass's device (rxe: RoCEv2 GIDs of its IP; siw:
// iWARP), its netdev (veth: no DCB, no ECN for RoCE, native XDP), and the
// sysctls init.sh set for rxe's loops.
func TestGuestDoctorAllDevices(t *testing.T) {
	d := guest.Device(t)
	out := runDoctor(t, "")
	subj := d.Name + "/1"
	out.expect(t, "port", subj, "ok", "ACTIVE", "Ethernet")
	switch d.Kind {
	case "rxe":
		out.expect(t, "gid", subj, "ok", "RoCEv2 GIDs of IP addresses", "::ffff:"+d.IP.String()+" ("+d.Netdev+")")
	case "siw":
		out.expect(t, "gid", subj, "ok", "iWARP device")
	}
	mtu, err := strconv.Atoi(readSys(t, "/sys/class/net/"+d.Netdev+"/mtu"))
	if err != nil {
		t.Fatal(err)
	}
	out.expect(t, "mtu", d.Netdev, "ok", fmt.Sprintf("MTU %d: RoCE MTU %v", mtu, ibv.MTUForNetdev(mtu)))
	out.expect(t, "pfc", d.Netdev, "ok", "not exposed by this driver (veth")
	out.expect(t, "ecn", d.Netdev, "ok", "not exposed by this driver (veth")
	out.expect(t, "xdp", d.Netdev, "ok", "driver veth: native XDP")
	rp := readSys(t, "/proc/sys/net/ipv4/conf/"+d.Netdev+"/rp_filter")
	out.expect(t, "rp_filter", d.Netdev, "ok", "rp_filter "+rp)
	if d.Kind == "rxe" { // siw's netdevs have no RoCEv2 GIDs: accept_local does not concern them
		out.expect(t, "accept_local", d.Netdev, "ok", "accept_local "+readSys(t, "/proc/sys/net/ipv4/conf/"+d.Netdev+"/accept_local"))
	}
	out.expect(t, "memlock", "host", "ok", "CAP_IPC_LOCK") // the guest's tests run as root
	out.expect(t, "counters", subj, "ok")
}

// TestGuestDoctorConfig: with the gateway's config (a userspace leg in
// user0, a verbs leg on the IB fabric's rxe2), doctor checks the legs; the
// user0 interface's NIC is checked again under ip netns exec.
func TestGuestDoctorConfig(t *testing.T) {
	guest.Device(t)
	ns, ib := guest.UserNetns(t), guest.IB(t)
	cfg := fmt.Sprintf(`legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: afxdp, netns: %s}
  - {name: ib, kind: verbs, ip: %v}
routes:
  - name: to-ib
    listen: {leg: roce, addr: "%v:18515"}
    target: {leg: ib, addr: "%v:18515"}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ns.IP, ib.PeerIP)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runDoctor(t, "", "--config", path)
	subj := ib.GatewayDevice + "/1"
	// rxe's GID table: index 0 the link-local GID, index 1 the IPv4 one.
	out.expect(t, "gid", subj, "ok", fmt.Sprintf("%v is RoCEv2 GID index 1 (::ffff:%v on %s)", ib.GatewayIP, ib.GatewayIP, ib.GatewayNetdev))
	out.expect(t, "pfc", ib.GatewayNetdev, "ok", "not exposed by this driver (veth")
	out.expect(t, "ecn", ib.GatewayNetdev, "ok", "not exposed by this driver")
	// user0's interface: the sysctls are read inside the namespace, the NIC
	// is not visible in this sysfs.
	out.expect(t, "mtu", ns.Netdev, "warn", "is in network namespace "+ns.Name)
	var rp string
	if err := ns.Do(func() error { rp = readSys(t, "/proc/sys/net/ipv4/conf/"+ns.Netdev+"/rp_filter"); return nil }); err != nil {
		t.Fatal(err)
	}
	sev := "ok"
	if rp == "1" {
		sev = "warn"
	}
	out.expect(t, "rp_filter", ns.Netdev, sev, "rp_filter "+rp)
	out.expect(t, "memlock", "host", "ok", "CAP_IPC_LOCK", "1 verbs leg", "AF_XDP")

	in := runDoctor(t, ns.Name, "--config", path)
	in.expect(t, "pfc", ns.Netdev, "ok", "not exposed by this driver (veth")
	in.expect(t, "ecn", ns.Netdev, "ok", "rbridge's transport")
	in.expect(t, "xdp", ns.Netdev, "ok", "driver veth: native XDP, AF_XDP in copy mode")
	in.expect(t, "kernel_roce", ns.Netdev, "ok", "no kernel RoCE device on "+ns.Netdev)
	in.expect(t, "mtu", ib.GatewayNetdev, "warn", "not in this network namespace's sysfs")
}

// TestGuestDoctorKernelRoCEOnLeg: a userspace leg put on the interface
// kernel rxe sits on is the classic conflict: doctor names the device and
// says to delete it.
func TestGuestDoctorKernelRoCEOnLeg(t *testing.T) {
	d := guest.RequireKind(t, "rxe")
	cfg := fmt.Sprintf(`legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: afxdp}
  - {name: ib, kind: verbs, ip: %v}
routes:
  - name: r
    listen: {leg: roce, addr: "%v:18515"}
    target: {leg: ib, addr: "%v:18515"}
`, d.Netdev, d.IP, d.PeerIP, d.IP, "198.18.9.9")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runDoctor(t, "", "--config", path)
	out.expect(t, "kernel_roce", d.Netdev, "error", d.Name+" (Soft-RoCE) is bound to "+d.Netdev)
	for _, f := range out.Findings {
		if f.Check == "kernel_roce" && f.Subject == d.Netdev && f.Fix != "rdma link delete "+d.Name {
			t.Errorf("kernel_roce fix %q, want %q", f.Fix, "rdma link delete "+d.Name)
		}
	}
	if out.Worst != "error" {
		t.Errorf("worst %q, want error", out.Worst)
	}
}
