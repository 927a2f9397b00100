package gateway_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/integration/guest"
)

// BenchmarkGuestNVMeThroughVsDirect: the kernel's NVMe-oF host against
// nvmet-rdma on the IB fabric (rxe3), in one run: direct from the IB
// fabric's other device (rxe2: one hop), and through `rbridge run`, staged,
// from the RoCE side (rxe1) over the userspace leg's UDP socket and with
// verbs legs on both sides (rxe0 and rxe2). Each row is one workload on
// one path: random 4 KiB reads or writes at queue depth 32 (IOPS), and
// 128 KiB ones at depth 8 (MB/s), O_DIRECT on the namespace, for nvmeBenchFor
// each; the through rows report x-direct (their rate over the direct
// row's) and the gateway process's CPU per I/O (gw-us/io, user and system
// time). It runs only when asked: make integration PKG=./integration/gateway
// RUN='^$' GUEST_BENCH=GuestNVMe BASELINE=false.
func BenchmarkGuestNVMeThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	ns, ib := guest.UserNetns(b), guest.IB(b)
	nvmeTarget(b, ib.PeerIP.String())
	roceGW := "198.18.1.1"
	nvmeThroughVsDirect(b, []nvmeBenchPath{
		{"direct", "", ib.PeerIP.String(), ib.GatewayIP.String()},
		{"through-udp", guestLegs("udp", ns, ib, nvmeReceives) + fmt.Sprintf(`routes:
  - {name: nvme, listen: {leg: roce, addr: "%v:4420"}, target: {leg: ib, addr: "%v:4420"}, protocol: nvme}
`, ns.IP, ib.PeerIP), ns.IP.String(), ns.PeerIP.String()},
		{"through-verbs", nvmeVerbsVerbs(ib, "roce", roceGW, "ib", ib.PeerIP.String()), roceGW, ns.PeerIP.String()},
	})
}

// BenchmarkGuestNVMeFromIBThroughVsDirect is the same in the other
// placement: nvmet-rdma on the RoCE side (rxe1), the host on the IB
// fabric (rxe3). Direct is from the RoCE segment's other device (rxe0:
// one hop); through the UDP leg the target's READs and WRITEs reach the
// gateway's own transport (nothing staged); with verbs legs on both sides
// they reach its RoCE HCA (rxe0) and are staged.
func BenchmarkGuestNVMeFromIBThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	ns, ib := guest.UserNetns(b), guest.IB(b)
	nvmeTarget(b, ns.PeerIP.String())
	roceGW := "198.18.1.1"
	nvmeThroughVsDirect(b, []nvmeBenchPath{
		{"direct", "", ns.PeerIP.String(), roceGW},
		{"through-udp", storageConfig("udp", ns, ib, nvmeReceives, "nvme", 4420, 4420) + "    protocol: nvme\n", ib.GatewayIP.String(), ib.PeerIP.String()},
		{"through-verbs", nvmeVerbsVerbs(ib, "ib", ib.GatewayIP.String(), "roce", ns.PeerIP.String()), ib.GatewayIP.String(), ib.PeerIP.String()},
	})
}

// nvmeBenchPath is one way a benchmark's host reaches the target: the
// gateway's config ("" for none), the address the host connects to and
// its own.
type nvmeBenchPath struct {
	name, cfg, traddr, host string
}

// nvmeVerbsVerbs is a gateway with verbs legs on both sides (rxe0 on the
// RoCE segment, the IB fabric's device), its route nvme from leg listen
// at addr to leg target at to, protocol: nvme.
func nvmeVerbsVerbs(ib guest.IBFabric, listen, addr, target, to string) string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: verbs, ip: 198.18.1.1, device: rxe0, receives: 128, receive_size: 16384}
  - {name: ib, kind: verbs, ip: %v, device: %s, receives: 128, receive_size: 16384}
routes:
  - {name: nvme, listen: {leg: %s, addr: "%s:4420"}, target: {leg: %s, addr: "%s:4420"}, protocol: nvme}
`, ib.GatewayIP, ib.GatewayDevice, listen, addr, target, to)
}

// nvmeThroughVsDirect runs the workloads over each path in turn, the
// direct one first: random 4 KiB reads or writes at queue depth 32 (IOPS),
// and 128 KiB ones at depth 8 (MB/s), O_DIRECT on the namespace, for
// nvmeBenchFor each; the through rows report x-direct (their rate over the
// direct row's) and the gateway process's CPU per I/O (gw-us/io, user and
// system time).
func nvmeThroughVsDirect(b *testing.B, paths []nvmeBenchPath) {
	loads := []struct {
		name  string
		size  int
		depth int
		write bool
	}{
		{"4k-read-qd32", 4 << 10, 32, false},
		{"4k-write-qd32", 4 << 10, 32, true},
		{"128k-read-qd8", 128 << 10, 8, false},
		{"128k-write-qd8", 128 << 10, 8, true},
	}
	direct := directRates{}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			gw := startBenchGateway(b, p.cfg)
			ctrl := nvmeConnect(b, p.traddr, p.host)
			dev := nvmeDisk(b, ctrl)
			for _, l := range loads {
				b.Run(l.name, func(b *testing.B) {
					var ops int64
					var took time.Duration
					var cpu time.Duration
					counters := gw.scrape()
					for range b.N {
						before := processCPU(gw.p)
						stop := gw.watch(b, p.name+"/"+l.name, nvmeBenchFor, dev)
						n, d, err := nvmeLoad(dev, l.size, l.depth, l.write, nvmeBenchFor)
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
					iops := float64(ops) / took.Seconds()
					b.ReportMetric(iops, "IOPS")
					b.ReportMetric(iops*float64(l.size)/1e6, "MB/s")
					if p.name == "direct" {
						direct.add(l.name, iops)
						return
					}
					if d := direct.median(l.name); d > 0 {
						b.ReportMetric(iops/d, "x-direct")
					}
					b.ReportMetric(float64(cpu.Microseconds())/float64(ops), "gw-us/io")
				})
			}
			nvmeDisconnect(b, ctrl)
		})
	}
}

// nvmeReceives are the verbs leg's keys for a storage route (what
// dist/rbridge.yaml and crossing.md advise): a receive for each capsule
// or completion a peer may have in flight, else its SENDs meet RNR NAKs.
const nvmeReceives = "    receives: 128\n    receive_size: 16384\n"

// nvmeBenchFor is how long each workload runs.
const nvmeBenchFor = 8 * time.Second

// nvmeLoad runs depth threads of O_DIRECT I/Os of size bytes at random
// aligned offsets in the device's first 64 MiB for d, and returns how
// many completed in how long.
func nvmeLoad(dev string, size, depth int, write bool, d time.Duration) (int64, time.Duration, error) {
	const span = 64 << 20
	return timedWorkers(depth, d, func(i int, stop time.Time, ops *atomic.Int64) error {
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_DIRECT, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		defer unix.Munmap(buf)
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		for time.Now().Before(stop) {
			off := int64(rng.IntN(span/size)) * int64(size)
			var err error
			if write {
				_, err = unix.Pwrite(fd, buf, off)
			} else {
				_, err = unix.Pread(fd, buf, off)
			}
			if err != nil {
				return fmt.Errorf("%s at %d: %w", dev, off, err)
			}
			ops.Add(1)
		}
		return nil
	})
}

// timedWorkers runs work on depth goroutines (numbered 0 to depth-1) until
// d from now, each counting what it did in ops; it returns the count and
// how long they took, or the first error one returned.
func timedWorkers(depth int, d time.Duration, work func(i int, stop time.Time, ops *atomic.Int64) error) (int64, time.Duration, error) {
	var ops atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, depth)
	start := time.Now()
	stop := start.Add(d)
	for i := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(i, stop, &ops); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return ops.Load(), took, nil
}

// processCPU is p's user and system time so far (0 without a process).
func processCPU(p *os.Process) time.Duration {
	user, sys := processTimes(p)
	return user + sys
}

// processTimes is p's user and system time so far (0 without a process).
func processTimes(p *os.Process) (user, sys time.Duration) {
	if p == nil {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th (fields 14 and 15 of the whole line).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut) * time.Second / 100, time.Duration(st) * time.Second / 100 // USER_HZ
}
