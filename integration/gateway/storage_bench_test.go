package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
)

// benchGateway is rbridge run under a storage benchmark: its process
// and its admin server's address (none on the direct path), and the
// last RoCEv2 packets of the initiator's RoCE device (ring).
type benchGateway struct {
	p     *os.Process
	admin string
	ns    guest.Netns // the RoCE segment's user namespace
	ring  *packetRing
}

// startBenchGateway starts rbridge run with cfg for a benchmark, with
// benchFlags; nothing for the direct path (cfg empty). With
// RBRIDGE_BENCH_STALL_PCAP set, a stall's last packets become an artifact
// (see watch).
func startBenchGateway(b *testing.B, cfg string) benchGateway {
	if cfg == "" {
		return benchGateway{}
	}
	logs, p := startRbridge(b, "", filepath.Join(b.TempDir(), "gateway.yaml"), cfg, benchFlags(b)...)
	g := benchGateway{p: p, admin: adminAddr(b, logs), ns: guest.UserNetns(b)}
	if os.Getenv("RBRIDGE_BENCH_STALL_PCAP") != "" {
		// The initiators of the storage benchmarks sit on the user
		// namespace's peer device, on the RoCE segment: every packet
		// between them and the gateway crosses its netdev, whichever kind
		// the gateway's RoCE leg is. A system call per packet: not in
		// the figures' runs.
		mtu := 1024 // a verbs leg's: rxe's active MTU on the guest's veths
		if m := regexp.MustCompile(`msg="userspace leg path MTU" leg=roce mtu=(\d+)`).FindStringSubmatch(logs.String()); m != nil {
			mtu, _ = strconv.Atoi(m[1])
		}
		g.ring = ringPackets(b, g.ns.PeerNetdev, stallPackets, mtu)
	}
	return g
}

// stallAfter is how long past its time a load may run before the
// gateway's state is logged: an I/O held that long waits for the
// initiator's own timeout (NVMe's and SCSI's are 30 s), which is a
// stall, not a slow path.
const stallAfter = 10 * time.Second

// stallPackets is how many of the last packets on the RoCE segment a
// stall's dump keeps (benchGateway.ring).
const stallPackets = 200000

// watch watches a load that should end within d: should it overrun d by
// stallAfter, the gateway's /status (each direction's queued and posted
// operations), its non-zero counters, the kernel's view of the RDMA QPs
// (rdma res show qp, with their PSNs), what the initiator's kernel holds
// for target (initiatorState) and where the segment's packets could drop
// (segmentDrops) go to b's log, once, while the stall lasts; with
// RBRIDGE_BENCH_STALL_PCAP, the last packets on the RoCE segment become
// the artifact stall-<benchmark>.pcap, which `rbridge decode` reads. stop
// ends the watch.
func (g benchGateway) watch(b *testing.B, what string, d time.Duration, target string) (stop func()) {
	if g.p == nil {
		return func() {}
	}
	done := make(chan struct{})
	t := time.AfterFunc(d+stallAfter, func() {
		defer close(done)
		var out strings.Builder
		if st, err := statusVia(http.DefaultClient, g.admin); err == nil {
			body, _ := json.MarshalIndent(st, "", "  ")
			fmt.Fprintf(&out, "GET /status:\n%s\n", body)
		} else {
			fmt.Fprintf(&out, "GET /status: %v\n", err)
		}
		m, err := getMetrics(g.admin)
		fmt.Fprintf(&out, "GET /metrics (%v):\n%s\n", err, strings.Join(nonZeroSamples(m, nil), "\n"))
		qps, err := exec.Command("rdma", "-d", "res", "show", "qp").CombinedOutput()
		fmt.Fprintf(&out, "rdma -d res show qp (%v):\n%s\n", err, qps)
		fmt.Fprintf(&out, "the initiator's side:\n%s\n", initiatorState(target))
		fmt.Fprintf(&out, "where the RoCE segment's packets could drop:\n%s\n", segmentDrops(g.ns))
		if g.ring != nil {
			name := "stall-" + strings.ReplaceAll(b.Name(), "/", "-") + ".pcap"
			guest.Artifact(b, name, g.ring.pcap())
			fmt.Fprintf(&out, "the last %d RoCEv2 packets on the RoCE segment: artifact %s\n", stallPackets, name)
		}
		b.Logf("%s: still running %v past its %v: the gateway now:\n%s", what, stallAfter, d, out.String())
	})
	// A dump under way when the load ends is waited for: b takes no log
	// once its benchmark has returned.
	return func() {
		if !t.Stop() {
			<-done
		}
	}
}

// initiatorState is what the initiator's kernel holds for target (a
// block device, or a file on a mount): the block device's requests in
// flight and its SCSI counters, the iSCSI sessions' and NVMe controllers'
// states, and the kernel's last messages.
func initiatorState(target string) string {
	var out strings.Builder
	if strings.HasPrefix(target, "/dev/") {
		dir := "/sys/block/" + filepath.Base(target)
		for _, f := range []string{"inflight", "stat", "device/state", "device/device_busy", "device/queue_depth",
			"device/iorequest_cnt", "device/iodone_cnt", "device/ioerr_cnt", "device/iotmo_cnt"} {
			if v, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				fmt.Fprintf(&out, "  %s: %s\n", f, strings.Join(strings.Fields(string(v)), " "))
			}
		}
	}
	for _, glob := range []string{"/sys/class/iscsi_session/session*/state", "/sys/class/iscsi_connection/connection*/state",
		"/sys/class/nvme/nvme*/state"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			v, _ := os.ReadFile(f)
			fmt.Fprintf(&out, "  %s: %s\n", f, strings.TrimSpace(string(v)))
		}
	}
	msgs, _ := exec.Command("dmesg").CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(msgs)), "\n")
	fmt.Fprintf(&out, "  dmesg, the last lines:\n    %s\n", strings.Join(lines[max(len(lines)-30, 0):], "\n    "))
	return out.String()
}

// segmentDrops is what the kernel counted on the RoCE segment's way into
// the gateway's userspace leg: UDP's receive errors in the user namespace,
// the interfaces' drops, and each CPU's backlog drops (softnet_stat's
// second column).
func segmentDrops(ns guest.Netns) string {
	var out strings.Builder
	snmp, err := exec.Command("/usr/sbin/ip", "netns", "exec", ns.Name, "cat", "/proc/net/snmp").CombinedOutput()
	for _, l := range strings.Split(string(snmp), "\n") {
		if strings.HasPrefix(l, "Udp:") {
			fmt.Fprintf(&out, "  %s: %s\n", ns.Name, l)
		}
	}
	if err != nil {
		fmt.Fprintf(&out, "  %s /proc/net/snmp: %v\n", ns.Name, err)
	}
	links, _ := exec.Command("/usr/sbin/ip", "-n", ns.Name, "-s", "link", "show", ns.Netdev).CombinedOutput()
	fmt.Fprintf(&out, "  %s %s:\n%s", ns.Name, ns.Netdev, links)
	links, _ = exec.Command("/usr/sbin/ip", "-s", "link", "show", ns.PeerNetdev).CombinedOutput()
	fmt.Fprintf(&out, "  %s:\n%s", ns.PeerNetdev, links)
	softnet, _ := os.ReadFile("/proc/net/softnet_stat")
	fmt.Fprintf(&out, "  softnet_stat:\n%s", softnet)
	return out.String()
}

// perOp logs, with RBRIDGE_BENCH_PROFILE set, what each of the gateway's
// counters moved by per operation between two scrapes (before, after),
// for what moved: what a path costs, in the gateway's own units (packets,
// posts, exposures, retries). A scrape that failed is said so.
func perOp(b *testing.B, before, after []byte, ops int64) {
	if os.Getenv("RBRIDGE_BENCH_PROFILE") == "" {
		return
	}
	if before == nil || after == nil {
		b.Logf("counters per operation: a scrape failed")
		return
	}
	values := func(scrape []byte) map[string]float64 {
		m := map[string]float64{}
		for _, l := range nonZeroSamples(scrape, nil) {
			i := strings.LastIndexByte(l, ' ')
			if v, err := strconv.ParseFloat(l[i+1:], 64); i > 0 && err == nil {
				m[l[:i]] = v
			}
		}
		return m
	}
	was, now := values(before), values(after)
	var lines []string
	for k, v := range now {
		if d := v - was[k]; d != 0 && !strings.HasPrefix(k, "go_") && !strings.HasPrefix(k, "process_") {
			lines = append(lines, fmt.Sprintf("  %s %.3g", k, d/float64(max(ops, 1))))
		}
	}
	sort.Strings(lines)
	b.Logf("counters per operation (%d operations):\n%s", ops, strings.Join(lines, "\n"))
}

// scrape is the gateway's /metrics, or nil (no gateway, or it failed).
func (g benchGateway) scrape() []byte {
	if g.p == nil {
		return nil
	}
	m, err := getMetrics(g.admin)
	if err != nil {
		return nil
	}
	return m
}

// nonZeroSamples are the lines of a /metrics scrape that hold a sample
// other than 0, and that keep accepts (nil: all of them).
func nonZeroSamples(scrape []byte, keep func(line string) bool) []string {
	var out []string
	for _, l := range strings.Split(string(scrape), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") && !strings.HasSuffix(l, " 0") && (keep == nil || keep(l)) {
			out = append(out, l)
		}
	}
	return out
}

// storagePath is one way from the initiator to the server in a storage
// benchmark: direct (cfg empty) or through `rbridge run` with cfg, whose
// route listens at addr.
type storagePath struct {
	name, cfg, addr string
}

// storagePaths are the placements the storage benchmarks compare, the
// server on the IB side (rxe3): direct, from this kernel to the server's
// own address (rxe3 to itself: the initiator binds no source address, so
// the one kernel's route to a local address is rxe's loopback, a hop
// without the veth the others cross: a direct path faster than a host
// on another machine would have); through the userspace leg over UDP
// (the initiator on rxe1); with verbs legs on both sides (rxe0 and rxe2).
// The routes listen on listen (a port), and reach the server at its
// port; route is the route's line under "routes:", given the listen
// address and the target's.
func storagePaths(b *testing.B, listen, port int, route func(listen, target string) string) []storagePath {
	ns, ib := guest.UserNetns(b), guest.IB(b)
	roceGW := netip.MustParseAddr("198.18.1.1") // rxe0's: the RoCE segment's other device
	verbs := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: verbs, ip: %v, device: rxe0, receives: 128, receive_size: 16384}
  - {name: ib, kind: verbs, ip: %v, device: %s, receives: 128, receive_size: 16384}
routes:
`, roceGW, ib.GatewayIP, ib.GatewayDevice)
	target := fmt.Sprintf("%v:%d", ib.PeerIP, port)
	return []storagePath{
		{"direct", "", ib.PeerIP.String()},
		{"through-udp", guestLegs("udp", ns, ib, nvmeReceives) + "routes:\n" + route(fmt.Sprintf("%v:%d", ns.IP, listen), target), ns.IP.String()},
		{"through-verbs", verbs + route(fmt.Sprintf("%v:%d", roceGW, listen), target), roceGW.String()},
	}
}

// storageLoad is one workload: O_DIRECT I/Os of size bytes at random
// offsets, depth at a time (nvmeLoad), or, with meta, files created,
// written with 4 KiB, closed and removed, depth at a time.
type storageLoad struct {
	name  string
	size  int
	depth int
	write bool
	meta  bool
}

var storageLoads = []storageLoad{
	{name: "4k-read-qd32", size: 4 << 10, depth: 32},
	{name: "128k-read-qd8", size: 128 << 10, depth: 8},
	{name: "128k-write-qd8", size: 128 << 10, depth: 8, write: true},
}

// storageBenchFor is how long each workload runs.
const storageBenchFor = 8 * time.Second

// runStorage runs loads on target (a block device or a file) for one
// path and reports IOPS, MB/s, and for a path through the gateway its
// rate over the direct path's (x-direct) and the gateway process's CPU
// per operation (gw-us/op).
func runStorage(b *testing.B, p storagePath, gw benchGateway, target, dir string, loads []storageLoad, direct directRates) {
	for _, l := range loads {
		b.Run(l.name, func(b *testing.B) {
			var ops int64
			var took, cpu time.Duration
			counters := gw.scrape()
			for range b.N {
				before := processCPU(gw.p)
				var n int64
				var d time.Duration
				var err error
				stop := gw.watch(b, p.name+"/"+l.name, storageBenchFor, target)
				if l.meta {
					n, d, err = metaLoad(dir, l.depth, storageBenchFor)
				} else {
					n, d, err = nvmeLoad(target, l.size, l.depth, l.write, storageBenchFor)
				}
				stop()
				if err != nil {
					b.Fatal(err)
				}
				cpu += processCPU(gw.p) - before
				ops += n
				took += d
			}
			if gw.p != nil {
				perOp(b, counters, gw.scrape(), ops)
			}
			rate := float64(ops) / took.Seconds()
			b.ReportMetric(rate, "ops/s")
			if !l.meta {
				b.ReportMetric(rate*float64(l.size)/1e6, "MB/s")
			}
			if p.name == "direct" {
				direct.add(l.name, rate)
				return
			}
			if d := direct.median(l.name); d > 0 {
				b.ReportMetric(rate/d, "x-direct")
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(max(ops, 1)), "gw-us/op")
		})
	}
}

// metaLoad runs depth goroutines, each creating a file of 4 KiB in dir,
// closing and removing it, for d; it returns the files done and how long.
func metaLoad(dir string, depth int, d time.Duration) (int64, time.Duration, error) {
	data := make([]byte, 4<<10)
	return timedWorkers(depth, d, func(i int, stop time.Time, ops *atomic.Int64) error {
		for n := 0; time.Now().Before(stop); n++ {
			name := filepath.Join(dir, fmt.Sprintf("m%d-%d", i, n))
			if err := os.WriteFile(name, data, 0o644); err != nil {
				return err
			}
			if err := os.Remove(name); err != nil {
				return err
			}
			ops.Add(1)
		}
		return nil
	})
}

// BenchmarkGuestISERThroughVsDirect: the kernel's iSER initiator against
// LIO's isert target on the IB fabric (rxe3, a 64 MiB RAM disk), direct
// and through `rbridge run` with protocol: iser, staged (storagePaths):
// random 4 KiB reads at queue depth 32, 128 KiB reads and writes at depth
// 8, O_DIRECT on the disk, for storageBenchFor each. It runs only when
// asked: make integration PKG=./integration/gateway RUN='^$'
// GUEST_BENCH='GuestISER|GuestNFS' BASELINE=false.
func BenchmarkGuestISERThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	iserTarget(b, guest.IB(b).PeerIP.String())
	iscsid(b)
	direct := directRates{}
	for _, p := range storagePaths(b, 3260, 3260, func(listen, target string) string {
		return fmt.Sprintf("  - {name: iser, listen: {leg: roce, addr: %q}, target: {leg: ib, addr: %q}, protocol: iser}\n", listen, target)
	}) {
		b.Run(p.name, func(b *testing.B) {
			gw := startBenchGateway(b, p.cfg)
			iserNode(b, p.addr)
			dev := iserLogin(b, p.addr)
			runStorage(b, p, gw, dev, "", storageLoads, direct)
			iserLogout(b, p.addr)
		})
	}
}

// BenchmarkGuestSRPThroughVsDirect: the kernel's SRP initiator (ib_srp
// over RDMA/CM) against LIO's srpt on the IB fabric (rxe3, a 64 MiB RAM
// disk), direct (from rxe3 itself) and through `rbridge run` with
// protocol: srp, staged (storagePaths, from rxe1): the workloads of
// BenchmarkGuestISERThroughVsDirect. It runs only when asked (see there).
func BenchmarkGuestSRPThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	ns, ib := guest.UserNetns(b), guest.IB(b)
	guid := srpTarget(b, ib.PeerDevice, srpInitiatorPort(b, ib.PeerDevice), srpInitiatorPort(b, ns.PeerDevice))
	direct := directRates{}
	for _, p := range storagePaths(b, srpRoutePort, srptPort, func(listen, target string) string {
		return fmt.Sprintf("  - {name: srp, listen: {leg: roce, addr: %q}, target: {leg: ib, addr: %q}, protocol: srp}\n", listen, target)
	}) {
		b.Run(p.name, func(b *testing.B) {
			gw := startBenchGateway(b, p.cfg)
			dev, port := ns.PeerDevice, srpRoutePort
			if p.cfg == "" {
				dev, port = ib.PeerDevice, srptPort
			}
			host, disk := srpLogin(b, dev, fmt.Sprintf("%s:%d", p.addr, port), guid)
			runStorage(b, p, gw, disk, "", storageLoads, direct)
			srpLogout(b, host)
		})
	}
}

// BenchmarkGuestNFSThroughVsDirect: the kernel's NFS client (4.2 over
// RDMA) against nfsd on the IB fabric (rxe3, a tmpfs), direct and through
// `rbridge run` with protocol: nfs, staged (storagePaths): on a 64 MiB
// file, random 4 KiB reads at depth 32, 128 KiB reads and writes at depth
// 8, O_DIRECT; and files of 4 KiB created, written and removed by 8 at a
// time (metadata: ops/s). It runs only when asked (see
// BenchmarkGuestISERThroughVsDirect).
func BenchmarkGuestNFSThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	nfsServer(b)
	ns, ib := guest.UserNetns(b), guest.IB(b)
	loads := append(append([]storageLoad(nil), storageLoads...), storageLoad{name: "create-remove-4k-x8", depth: 8, meta: true})
	direct := directRates{}
	for _, p := range storagePaths(b, 20050, 20049, func(listen, target string) string {
		return fmt.Sprintf("  - {name: nfs, listen: {leg: roce, addr: %q}, target: {leg: ib, addr: %q}, protocol: nfs}\n", listen, target)
	}) {
		b.Run(p.name, func(b *testing.B) {
			gw := startBenchGateway(b, p.cfg)
			port, client := 20049, ib.PeerIP.String()
			if p.cfg != "" {
				port, client = 20050, ns.PeerIP.String()
			}
			mnt := "/mnt/nfs-bench-" + p.name
			nfsMount(b, p.addr, client, mnt, port)
			dir := filepath.Join(mnt, p.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			file := filepath.Join(dir, "data")
			if err := os.WriteFile(file, make([]byte, 64<<20), 0o644); err != nil {
				b.Fatal(err)
			}
			unix.Sync()
			runStorage(b, p, gw, file, dir, loads, direct)
			if err := os.RemoveAll(dir); err != nil {
				b.Error(err)
			}
			if err := unix.Unmount(mnt, 0); err != nil {
				b.Errorf("unmount: %v", err)
			}
		})
	}
}
