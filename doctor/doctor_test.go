package doctor_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/doctor"
)

// The checks run on the crafted trees in testdata (mkfixtures.sh writes
// them): good, where a RoCE gateway host is set up as it should be, and
// bad, where each check finds its failure; rxe-good and rxe-bad follow the
// integration guest's real sysfs (rxe on veth pairs).

// fakeSystem answers the dcbnl, ethtool and address questions from maps.
type fakeSystem struct {
	dcb     map[string]doctor.DCB // absent: not exposed
	drivers map[string]string
	addrs   map[string][]netip.Addr
}

func (f fakeSystem) InNetns(_ string, fn func() error) error { return fn() }

func (f fakeSystem) DCB(ifname string) (doctor.DCB, error) {
	d, ok := f.dcb[ifname]
	if !ok {
		return doctor.DCB{}, fmt.Errorf("dcbnl %s: %w", ifname, doctor.ErrNotExposed)
	}
	return d, nil
}

func (f fakeSystem) Driver(ifname string) (string, error) {
	if d, ok := f.drivers[ifname]; ok {
		return d, nil
	}
	return "", fmt.Errorf("ethtool %s: no such device", ifname)
}

func (f fakeSystem) Addrs() (map[string][]netip.Addr, error) { return f.addrs, nil }

var _ doctor.System = fakeSystem{}

// lossless is a NIC set up for lossless RoCE: PFC on priority 3, DSCP 26
// trusted onto it.
var lossless = doctor.DCB{PFCCap: 8, PFCEnabled: 1 << 3, DSCP: map[uint8]uint8{26: 3, 48: 6}}

var systems = map[string]fakeSystem{
	"good":     {dcb: map[string]doctor.DCB{"eth0": lossless, "eth1": lossless}},
	"bad":      {dcb: map[string]doctor.DCB{"eth0": {PFCCap: 8}, "eth1": {PFCCap: 8, PFCEnabled: 1 << 3, DSCP: map[uint8]uint8{26: 0}}}},
	"rxe-good": {drivers: map[string]string{"veth0": "veth", "veth1": "veth", "br1": "bridge"}},
	"rxe-bad":  {drivers: map[string]string{"veth0": "veth", "veth1": "veth", "br1": "bridge"}},
}

// The configs: a verbs leg on mlx5_0 (198.18.1.3) and a userspace leg on
// eth1 (bad: where mlx5_1's RoCE is still on) or eth2 (no native XDP).
const mlx5Config = `legs:
  - {name: ib, kind: verbs, ip: 198.18.1.3, device: mlx5_0}
  - {name: roce, kind: userspace, interface: %s, ip: 198.18.2.1, io: afxdp}
routes:
  - name: r
    listen: {leg: roce, addr: "198.18.2.1:7471"}
    target: {leg: ib, addr: "198.18.1.9:7471"}
`

// rxeConfig: a userspace leg on rxe0's own veth0 (the conflict) and a
// verbs leg on rxe1.
const rxeConfig = `legs:
  - {name: roce, kind: userspace, interface: veth0, ip: 198.18.1.1, io: afxdp}
  - {name: ib, kind: verbs, ip: 198.18.1.2}
routes:
  - name: r
    listen: {leg: roce, addr: "198.18.1.1:7471"}
    target: {leg: ib, addr: "198.18.1.9:7471"}
`

func run(t *testing.T, tree, cfg string, o doctor.Options) *doctor.Report {
	t.Helper()
	if o.Root == "" {
		o.Root = filepath.Join("testdata", tree)
	}
	if cfg != "" {
		c, err := config.Parse("gw.yaml", []byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		o.Config = c
	}
	if o.System == nil {
		o.System = systems[tree]
	}
	o.RoCEPriority, o.RoCEDSCP = doctor.DefaultRoCEPriority, doctor.DefaultRoCEDSCP
	if o.Interval == 0 {
		o.Interval = -1
	}
	r, err := doctor.Run(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// find returns the findings of check on subject.
func find(r *doctor.Report, check, subject string) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range r.Findings {
		if f.Check == check && f.Subject == subject {
			out = append(out, f)
		}
	}
	return out
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tree, cfg    string
		check, subj  string
		sev          doctor.Severity
		finding, fix string // substrings
	}{
		{"port active", "good", mlx5Config, "port", "mlx5_0/1", doctor.OK, "port ACTIVE, link layer Ethernet", ""},
		{"port down", "bad", mlx5Config, "port", "mlx5_0/1", doctor.Error, `port state "1: DOWN"`, "ip link set IF up"},
		{"gid RoCEv2 index", "good", mlx5Config, "gid", "mlx5_0/1", doctor.OK, "198.18.1.3 is RoCEv2 GID index 3 (::ffff:198.18.1.3 on eth0); also index 2 (IB/RoCE v1)", "need 3 too, not 0"},
		{"gid RoCE v1 only", "bad", mlx5Config, "gid", "mlx5_0/1", doctor.Error, "198.18.1.3 has no RoCEv2 GID on mlx5_0/1 (only index 2 (IB/RoCE v1))", "cma_roce_mode"},
		{"gid every device", "good", "", "gid", "mlx5_0/1", doctor.OK, "RoCEv2 GIDs of IP addresses: index 3 ::ffff:198.18.1.3 (eth0)", ""},
		{"gid every device, v1 only", "bad", "", "gid", "mlx5_0/1", doctor.Error, "RoCE v1 GIDs only: index 2 ::ffff:198.18.1.3 (eth0)", "cma_roce_mode"},
		{"gid InfiniBand", "good", "", "gid", "mlx5_2/1", doctor.OK, "InfiniBand GID index 0 fe80::c42:a103:65:9a10", ""},
		{"gid InfiniBand without SM", "bad", "", "gid", "mlx5_2/1", doctor.Error, "InfiniBand port without a GID", "subnet manager"},
		{"port InfiniBand INIT", "bad", "", "port", "mlx5_2/1", doctor.Error, `port state "2: INIT"`, "subnet manager"},
		{"gid rxe", "rxe-good", rxeConfig, "gid", "rxe1/1", doctor.OK, "198.18.1.2 is RoCEv2 GID index 1 (::ffff:198.18.1.2 on br1)", ""},
		{"gid siw", "rxe-good", "", "gid", "siw0/1", doctor.OK, "iWARP device", ""},
		{"mtu 9000", "good", mlx5Config, "mtu", "eth0", doctor.OK, "MTU 9000: RoCE MTU 4096", ""},
		{"mtu 1000", "bad", mlx5Config, "mtu", "eth0", doctor.Warn, "MTU 1000: RoCE MTU 512, below the 1024", "1500 or more"},
		{"mtu 1500", "bad", mlx5Config, "mtu", "eth1", doctor.OK, "MTU 1500: RoCE MTU 1024", "4192 or more"},
		{"mtu per leg", "good", mlx5Config, "mtu", "legs", doctor.OK, "RoCE MTU per leg: ib 4096, roce 4096", ""},
		{"ipoib 4092", "good", "", "ipoib", "ib0", doctor.OK, "IPoIB datagram mode, MTU 4092", ""},
		{"ipoib 1500", "bad", "", "ipoib", "ib0", doctor.Warn, "IPoIB datagram mode, MTU 1500: below the 2044", "connected"},
		{"pfc on", "good", mlx5Config, "pfc", "eth0", doctor.OK, "PFC on for priority 3", ""},
		{"pfc off", "bad", mlx5Config, "pfc", "eth0", doctor.Warn, "PFC off for priority 3", "dcb pfc set dev eth0 prio-pfc 3:on"},
		{"pfc not exposed", "rxe-good", "", "pfc", "veth0", doctor.OK, "not exposed by this driver (veth has no DCB operations)", ""},
		{"dscp trusted", "good", mlx5Config, "dscp", "eth0", doctor.OK, "DSCP 26 maps to priority 3", ""},
		{"pcp trusted", "bad", mlx5Config, "dscp", "eth0", doctor.Warn, "trusts PCP (802.1p), not DSCP", "dcb app add dev eth0 dscp-prio 26:3"},
		{"dscp to the wrong priority", "bad", mlx5Config, "dscp", "eth1", doctor.Warn, "DSCP 26 maps to priority 0, not RoCE's 3", "dcb app replace dev eth1 dscp-prio 26:3"},
		{"ecn on", "good", mlx5Config, "ecn", "eth0", doctor.OK, "ECN for RoCE on for priority 3", ""},
		{"ecn off", "bad", mlx5Config, "ecn", "eth0", doctor.Warn, "off for priority 3: roce_np (CNPs for ECN-CE packets)", "echo 1 > /sys/class/net/eth0/ecn/roce_np/enable/3"},
		{"ecn not exposed", "rxe-good", "", "ecn", "veth0", doctor.OK, "not exposed by this driver (veth has no ecn/roce_np, roce_rp; mlx5 has them); net.ipv4.tcp_ecn is TCP's and does not apply", ""},
		{"ecn userspace leg", "good", mlx5Config, "ecn", "eth1", doctor.OK, "rbridge's transport answers ECN-CE", ""},
		{"rp_filter loose", "good", mlx5Config, "rp_filter", "eth0", doctor.OK, "rp_filter 2 (loose)", ""},
		{"rp_filter strict", "bad", mlx5Config, "rp_filter", "eth0", doctor.Warn, "rp_filter 1 (strict; all=1, eth0=1)", "rp_filter=2"},
		{"rp_filter off for rxe", "rxe-good", rxeConfig, "rp_filter", "br1", doctor.OK, "rp_filter 0 (off)", ""},
		{"rp_filter strict for rxe", "rxe-bad", rxeConfig, "rp_filter", "br1", doctor.Warn, "rp_filter 1 (strict", ""},
		{"accept_local for rxe", "rxe-good", rxeConfig, "accept_local", "br1", doctor.OK, "accept_local 1", ""},
		{"no accept_local for rxe", "rxe-bad", rxeConfig, "accept_local", "br1", doctor.Warn, "accept_local 0 with Soft-RoCE devices on br1, veth0, veth4, veth5", "accept_local=1"},
		{"hugepages", "good", "", "hugepages", "host", doctor.OK, "128 free huge pages of 2 MiB hold the 128 MiB pool", ""},
		{"no hugepages, no THP", "bad", "", "hugepages", "host", doctor.Warn, "transparent huge pages off", "vm.nr_hugepages=64"},
		{"hugepages THP", "rxe-good", "", "hugepages", "host", doctor.Warn, "falls back to transparent huge pages", "vm.nr_hugepages=64"},
		{"memlock unlimited", "good", mlx5Config, "memlock", "host", doctor.OK, "RLIMIT_MEMLOCK unlimited: 256 MiB to pin (the 128 MiB pool registered on 1 verbs leg(s) and as the UMEM of 1 AF_XDP leg(s))", ""},
		{"memlock 64 KiB", "bad", mlx5Config, "memlock", "host", doctor.Error, "RLIMIT_MEMLOCK 64 KiB, below the 256 MiB", "LimitMEMLOCK=infinity"},
		{"memlock for the file's pool", "good", mlx5Config + "pool: {size: 1GiB}\n", "memlock", "host", doctor.OK, "2 GiB to pin (the 1 GiB pool registered on 1 verbs leg(s)", ""},
		{"memlock CAP_IPC_LOCK", "rxe-good", rxeConfig, "memlock", "host", doctor.OK, "CAP_IPC_LOCK", ""},
		{"clocksource tsc", "good", "", "clocksource", "host", doctor.OK, "clocksource tsc: clock reads stay in user space (vDSO)", ""},
		{"clocksource hpet, tsc refused", "bad", "", "clocksource", "host", doctor.Warn, "clocksource hpet: the vDSO cannot read it, so every clock read is a system call", "boot with tsc=reliable"},
		{"clocksource hpet, tsc there", "rxe-bad", "", "clocksource", "host", doctor.Warn, "clocksource hpet", "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource"},
		{"xdp native zero-copy", "good", mlx5Config, "xdp", "eth1", doctor.OK, "driver ice: native XDP, AF_XDP zero-copy", ""},
		{"xdp generic", "bad", fmt.Sprintf(mlx5Config, "eth2"), "xdp", "eth2", doctor.Warn, "driver r8169: no native XDP, only generic mode", "io: udp"},
		{"xdp veth", "rxe-good", rxeConfig, "xdp", "veth0", doctor.OK, "driver veth: native XDP, AF_XDP in copy mode", ""},
		{"xdp every queue", "good", mlx5Config, "xdp", "eth1", doctor.OK, "8 receive queues: the leg binds an AF_XDP socket and runs a receive loop on each", ""},
		{"xdp fewer queues", "good", strings.Replace(mlx5Config, "io: afxdp}", "io: afxdp, queues: 4}", 1), "xdp", "eth1", doctor.Warn, "queues 4 of the 8 receive queues eth1 has: what RSS puts on the other 4 goes to the kernel", "ethtool -X eth1 equal 4"},
		{"xdp more queues", "good", strings.Replace(mlx5Config, "io: afxdp}", "io: afxdp, queues: 16}", 1), "xdp", "eth1", doctor.Error, "queues 16, but eth1 has 8 receive queues: the leg does not start", "queues: 8"},
		{"xdp all queues", "good", strings.Replace(mlx5Config, "io: afxdp}", "io: afxdp, queues: 8}", 1), "xdp", "eth1", doctor.OK, "queues 8: an AF_XDP socket on each of the 8 receive queues", ""},
		{"no kernel RoCE", "good", mlx5Config, "kernel_roce", "eth1", doctor.OK, "no kernel RoCE device on eth1", ""},
		{"mlx5 RoCE on", "bad", mlx5Config, "kernel_roce", "eth1", doctor.Error, "mlx5_1 (mlx5_core) has RoCE enabled on eth1", "devlink dev param set pci/0000:5e:00.0 name enable_roce value false cmode driverinit"},
		{"rxe on the leg", "rxe-good", rxeConfig, "kernel_roce", "veth0", doctor.Error, "rxe0 (Soft-RoCE) is bound to veth0", "rdma link delete rxe0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if strings.Contains(cfg, "%s") {
				cfg = fmt.Sprintf(cfg, "eth1")
			}
			r := run(t, tc.tree, cfg, doctor.Options{})
			fs := find(r, tc.check, tc.subj)
			for _, f := range fs {
				if f.Severity == tc.sev && strings.Contains(f.Message, tc.finding) && strings.Contains(f.Fix, tc.fix) {
					return
				}
			}
			t.Errorf("no %v %s finding on %s with %q (fix %q); got:\n%s", tc.sev, tc.check, tc.subj, tc.finding, tc.fix, dump(fs))
		})
	}
}

func dump(fs []doctor.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %v %q fix %q\n", f.Severity, f.Message, f.Fix)
	}
	if b.Len() == 0 {
		return "  (none)"
	}
	return b.String()
}

// TestWorst: the good tree has no warning or error; the bad one has errors.
func TestWorst(t *testing.T) {
	if r := run(t, "good", fmt.Sprintf(mlx5Config, "eth1"), doctor.Options{}); r.Worst() != doctor.OK {
		var bad []doctor.Finding
		for _, f := range r.Findings {
			if f.Severity != doctor.OK {
				bad = append(bad, f)
			}
		}
		t.Errorf("good tree: worst %v, want ok:\n%s", r.Worst(), dump(bad))
	}
	if r := run(t, "bad", fmt.Sprintf(mlx5Config, "eth1"), doctor.Options{}); r.Worst() != doctor.Error {
		t.Errorf("bad tree: worst %v, want error", r.Worst())
	}
}

// copyTree copies a testdata tree where a test may change it.
func copyTree(t *testing.T, tree string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), tree)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", tree))); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCounters: counters that rise between the two samples are named with
// their rise; counters that stay put are not.
func TestCounters(t *testing.T) {
	mlx5 := fmt.Sprintf(mlx5Config, "eth1")
	for _, tc := range []struct {
		name            string
		tree, cfg, port string         // the port: device/port
		rise            map[string]int // hw_counters file -> rise between samples
		sev             doctor.Severity
		finding         string
	}{
		{"quiet", "good", mlx5, "mlx5_0/1", nil, doctor.OK, "none of 11 trouble counters rose in 10ms"},
		{"loss and congestion", "good", mlx5, "mlx5_0/1", map[string]int{"hw_counters/out_of_sequence": 7, "hw_counters/np_cnp_sent": 40, "counters/symbol_error": 2},
			doctor.Warn, "rising in 10ms: np_cnp_sent +40 (congestion: ECN-marked packets arrived, CNPs sent); out_of_sequence +7 (loss: packets arrived out of sequence); symbol_error +2 (link: bit errors"},
		// rxe's names, which procfs does not know, are read as well.
		{"rxe quiet", "rxe-good", rxeConfig, "rxe1/1", nil, doctor.OK, "none of 3 trouble counters rose in 10ms"},
		{"rxe loss", "rxe-good", rxeConfig, "rxe1/1", map[string]int{"hw_counters/rcvd_seq_err": 3, "hw_counters/rcvd_pkts": 100},
			doctor.Warn, "rising in 10ms: rcvd_seq_err +3 (loss: sequence-error NAKs received)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := copyTree(t, tc.tree)
			dev, num, _ := strings.Cut(tc.port, "/")
			port := filepath.Join(root, "sys/class/infiniband", dev, "ports", num)
			slept := false
			r := run(t, tc.tree, tc.cfg, doctor.Options{Root: root, Interval: 10 * time.Millisecond, Sleep: func(d time.Duration) {
				slept = d == 10*time.Millisecond
				for f, n := range tc.rise {
					if err := os.WriteFile(filepath.Join(port, f), []byte(fmt.Sprintf("%d\n", n)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}})
			if !slept {
				t.Fatal("the counter check did not wait its interval between the samples")
			}
			fs := find(r, "counters", tc.port)
			if len(fs) != 1 || fs[0].Severity != tc.sev || !strings.Contains(fs[0].Message, tc.finding) {
				t.Errorf("counters: got\n%s want %v %q", dump(fs), tc.sev, tc.finding)
			}
		})
	}
}

// TestInterfaceInNetns: a leg's interface in another network namespace is
// not in this sysfs; doctor says so and how to check it.
func TestInterfaceInNetns(t *testing.T) {
	r := run(t, "good", `legs:
  - {name: ib, kind: verbs, ip: 198.18.1.3}
  - {name: roce, kind: userspace, interface: vuser1, ip: 198.18.2.1, netns: user0}
routes:
  - name: r
    listen: {leg: roce, addr: "198.18.2.1:7471"}
    target: {leg: ib, addr: "198.18.1.9:7471"}
`, doctor.Options{})
	fs := find(r, "mtu", "vuser1")
	if len(fs) != 1 || fs[0].Severity != doctor.Warn || !strings.Contains(fs[0].Fix, "ip netns exec user0 rbridge doctor") {
		t.Errorf("vuser1 in user0: got\n%s", dump(fs))
	}
	for _, check := range []string{"pfc", "xdp"} {
		if fs := find(r, check, "vuser1"); len(fs) != 0 {
			t.Errorf("%s on vuser1 again after the first said it is not visible:\n%s", check, dump(fs))
		}
	}
}

// TestVerbsLegWithoutGID: a verbs leg whose IP no device holds is an error
// naming the leg.
func TestVerbsLegWithoutGID(t *testing.T) {
	r := run(t, "good", strings.Replace(fmt.Sprintf(mlx5Config, "eth1"), "ip: 198.18.1.3, device: mlx5_0", "ip: 198.18.7.7", 1), doctor.Options{})
	fs := find(r, "gid", "leg ib")
	if len(fs) != 1 || fs[0].Severity != doctor.Error || fs[0].Message != "no GID of any RDMA device holds 198.18.7.7" {
		t.Errorf("got\n%s", dump(fs))
	}
}

func TestRunRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		o    doctor.Options
		want string
	}{
		{doctor.Options{Root: "testdata/nonexistent"}, `doctor: root "testdata/nonexistent": not a directory`},
		{doctor.Options{Root: "testdata/good", RoCEPriority: 8}, "doctor: RoCE priority 8: want 0 to 7"},
		{doctor.Options{Root: "testdata/good", RoCEDSCP: 64}, "doctor: RoCE DSCP 64: want 0 to 63"},
		{doctor.Options{Root: "testdata/good", PoolSize: -1}, "doctor: pool size -1: want a positive size"},
	} {
		if _, err := doctor.Run(tc.o); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestOutput: the table has a line per finding, fixes below, and the
// count; JSON has every finding and the worst severity.
func TestOutput(t *testing.T) {
	r := run(t, "bad", fmt.Sprintf(mlx5Config, "eth1"), doctor.Options{})
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if !strings.HasPrefix(lines[0], "SEVERITY  CHECK") {
		t.Errorf("header %q", lines[0])
	}
	var n [3]int
	for _, f := range r.Findings {
		n[f.Severity]++
	}
	if want := fmt.Sprintf("%d ok, %d warnings, %d errors", n[0], n[1], n[2]); lines[len(lines)-1] != want {
		t.Errorf("last line %q, want %q", lines[len(lines)-1], want)
	}
	if !strings.Contains(text.String(), "error     kernel_roce  eth1 (leg roce)") || !strings.Contains(text.String(), "-> devlink dev param set") {
		t.Errorf("the table lacks the kernel_roce row or its fix:\n%s", text.String())
	}
	// A finding about the leg itself (a quic leg's certificate) names it once.
	text.Reset()
	leg := &doctor.Report{Findings: []doctor.Finding{{Check: "tunnel", Subject: "leg gw", Leg: "gw", Severity: doctor.OK, Message: "ok"}}}
	if err := leg.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if s := text.String(); !regexp.MustCompile(`tunnel +leg gw +ok`).MatchString(s) || strings.Contains(s, "(leg gw)") {
		t.Errorf("a leg's own finding:\n%s", s)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Findings []doctor.Finding `json:"findings"`
		Worst    string           `json:"worst"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Worst != "error" || len(got.Findings) != len(r.Findings) {
		t.Errorf("JSON: worst %q, %d findings; want error, %d", got.Worst, len(got.Findings), len(r.Findings))
	}
}

// TestCapturedTreeAsksNotTheHost: with a root other than "/" and no
// System, the dcbnl question is not put to the running host, whose
// interfaces the tree does not describe.
func TestCapturedTreeAsksNotTheHost(t *testing.T) {
	r, err := doctor.Run(doctor.Options{Root: "testdata/good", Interval: -1, RoCEPriority: 3, RoCEDSCP: 26})
	if err != nil {
		t.Fatal(err)
	}
	fs := find(r, "pfc", "eth0")
	if len(fs) != 1 || fs[0].Severity != doctor.Warn || !strings.Contains(fs[0].Message, "a captured tree holds no netlink or ethtool answers") {
		t.Errorf("pfc on a captured tree's eth0:\n%s", dump(fs))
	}
}

// TestVerbsLegOnIWARP: a verbs leg whose ip is on the netdev an iWARP
// device runs on (siw0 on veth2 in the guest's tree) is found on that
// device, as rbridge run finds it: its GID is the netdev's hardware
// address; the memlock check knows siw pins against the limit even with
// CAP_IPC_LOCK. Another device named is still an error.
func TestVerbsLegOnIWARP(t *testing.T) {
	sys := systems["rxe-good"]
	sys.addrs = map[string][]netip.Addr{"veth2": {netip.MustParseAddr("198.18.2.1")}, "br1": {netip.MustParseAddr("198.18.1.2")}}
	cfg := `legs:
  - {name: ib, kind: verbs, ip: 198.18.2.1%s}
  - {name: roce, kind: verbs, ip: 198.18.1.2}
routes:
  - name: r
    listen: {leg: roce, addr: "198.18.1.2:7471"}
    target: {leg: ib, addr: "198.18.2.2:7471"}
`
	r := run(t, "rxe-good", fmt.Sprintf(cfg, ""), doctor.Options{System: sys})
	if fs := find(r, "gid", "siw0/1"); len(fs) != 1 || fs[0].Severity != doctor.OK || fs[0].Leg != "ib" || !strings.HasPrefix(fs[0].Message, "iWARP device") {
		t.Errorf("gid on siw0/1 for leg ib: got\n%s", dump(find(r, "gid", "")))
	}
	if fs := find(r, "gid", "leg ib"); len(fs) != 0 {
		t.Errorf("leg ib not found on siw0:\n%s", dump(fs))
	}
	// The tree's process has CAP_IPC_LOCK, which siw does not honour.
	if fs := find(r, "memlock", "host"); len(fs) != 1 || strings.Contains(fs[0].Message, "not bounded by RLIMIT_MEMLOCK") || strings.Contains(fs[0].Message, "without CAP_IPC_LOCK") || !strings.Contains(fs[0].Message, "iWARP device siw0 pins against RLIMIT_MEMLOCK") {
		t.Errorf("memlock with a leg on siw0: got\n%s", dump(fs))
	}
	r = run(t, "rxe-good", fmt.Sprintf(cfg, ", device: rxe0"), doctor.Options{System: sys})
	if fs := find(r, "gid", "leg ib"); len(fs) != 1 || fs[0].Severity != doctor.Error {
		t.Errorf("leg ib naming rxe0: got\n%s", dump(find(r, "gid", "")))
	}
}
