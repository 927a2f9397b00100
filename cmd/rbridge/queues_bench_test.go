package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/internal/vethtest"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// benchApp is a client or target: a transport device on its own UDP
// socket, the IB CM, and memory.
type benchApp struct {
	dev *transport.Device
	cm  *cm.Manager
	pd  *transport.PD
	mr  *transport.MR
	cq  *transport.CQ
}

func newBenchApp(b *testing.B, ip string) *benchApp {
	b.Helper()
	return newBenchAppIn(b, "", ip)
}

// newBenchAppIn is newBenchApp with its socket in network namespace ns
// ("": this process's).
func newBenchAppIn(b *testing.B, ns, ip string) *benchApp {
	b.Helper()
	a := &benchApp{pd: transport.NewPD(), cq: transport.NewCQ(4096)}
	var uc *udpconn.Conn
	err := netns.Do(ns, func() error {
		var err error
		uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr(ip), roce.Port)})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if a.dev, err = transport.NewDevice(uc, transport.DeviceOptions{Logger: testlog.New(b)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.dev.Close() })
	if a.cm, err = cm.New(cm.Options{Device: a.dev, Addr: netip.MustParseAddr(ip), Logger: testlog.New(b)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.cm.Close() })
	if a.mr, err = a.pd.RegisterMR(make([]byte, 8<<20), transport.AccessLocalWrite|transport.AccessRemoteWrite); err != nil {
		b.Fatal(err)
	}
	return a
}

func (a *benchApp) qp(b *testing.B) *transport.QP {
	qp, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: a.cq, RecvCQ: a.cq, MaxSendWR: 64})
	if err != nil {
		b.Fatal(err)
	}
	return qp
}

// procCPU is the CPU time (user and system) process pid has used.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, err := strconv.ParseUint(f[11], 10, 64) // utime, field 14
	if err != nil {
		b.Fatalf("/proc/%d/stat: utime: %v", pid, err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64) // stime, field 15
	if err != nil {
		b.Fatalf("/proc/%d/stat: stime: %v", pid, err)
	}
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// BenchmarkGatewayQueues runs `rbridge run` in a process of its own, its
// two userspace legs (io: udp, loopback) with 1 and with 2 receive loops
// each (queues), between a client and a target in this process: 8
// sessions, each keeping 8 RDMA WRITEs of 64 KiB outstanding. Beside the
// rate it reports the gateway process's CPU per GB carried (gw-cpu-s/GB,
// from /proc) and its CPU use (gw-cpus: cores busy on average). With
// RBRIDGE_BENCH_PROFILE=DIR the gateway writes its CPU profile there,
// gateway-queues-N.pprof.
func BenchmarkGatewayQueues(b *testing.B) {
	for _, queues := range []int{1, 2} {
		b.Run(fmt.Sprint("queues=", queues), func(b *testing.B) { benchGatewayQueues(b, queues) })
	}
}

func benchGatewayQueues(b *testing.B, queues int) {
	needs.Root(b, "a reuseport BPF program")
	// 127.0.15.0/24: this benchmark's own addresses.
	cfg := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.15.1, io: udp, queues: %d}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.15.2, io: udp, queues: %d}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.15.1:7471"}
    target: {leg: b, addr: "127.0.15.4:7471"}
admin: {listen: ADMIN, control: ""}
`, queues, queues)
	target := newBenchApp(b, "127.0.15.4")
	dial := make([]netip.AddrPort, gatewayLoadSessions)
	for i := range dial {
		dial[i] = netip.MustParseAddrPort("127.0.15.1:7471")
	}
	runGatewayLoad(b, cfg, fmt.Sprintf("gateway-queues-%d.pprof", queues), newBenchApp(b, "127.0.15.3"), []*benchApp{target}, dial)
}

// BenchmarkGatewayQueuesAFXDP is BenchmarkGatewayQueues with the targets'
// leg on AF_XDP: the gateway's leg b (io: afxdp) on a veth of 1 and of 2
// queues, one AF_XDP socket and receive loop on each; the client's leg a
// over UDP on loopback with as many loops. Eight targets in the veth's
// other namespace, one address each, so that their packets' flows spread
// over the queues (the veth's sender picks a queue by flow hash), and one
// session to each. With RBRIDGE_BENCH_PROFILE=DIR the gateway writes its
// CPU profile there, gateway-queues-afxdp-N.pprof.
func BenchmarkGatewayQueuesAFXDP(b *testing.B) {
	for _, queues := range []int{1, 2} {
		b.Run(fmt.Sprint("queues=", queues), func(b *testing.B) { benchGatewayQueuesAFXDP(b, queues) })
	}
}

func benchGatewayQueuesAFXDP(b *testing.B, queues int) {
	needs.Root(b, "a reuseport BPF program, XDP, AF_XDP, network namespaces")
	gwNS, peerNS, gwIf, peerIf := vethtest.Namespaces(b, "XDP, AF_XDP, network namespaces", "rbk", "10.89.0.1/24", "10.89.0.2/24", queues)
	var routes strings.Builder
	targets := make([]*benchApp, gatewayLoadSessions)
	dial := make([]netip.AddrPort, gatewayLoadSessions)
	for i := range targets {
		ip := fmt.Sprintf("10.89.0.%d", 10+i)
		if out, err := exec.Command("ip", "-n", peerNS, "addr", "add", ip+"/24", "dev", peerIf).CombinedOutput(); err != nil {
			b.Fatalf("ip addr add %s: %v: %s", ip, err, out)
		}
		targets[i] = newBenchAppIn(b, peerNS, ip)
		dial[i] = netip.AddrPortFrom(netip.MustParseAddr("127.0.15.1"), uint16(7480+i))
		fmt.Fprintf(&routes, "  - name: r%d\n    listen: {leg: a, addr: \"127.0.15.1:%d\"}\n    target: {leg: b, addr: \"%s:7471\"}\n", i, 7480+i, ip)
	}
	cfg := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.15.1, io: udp, queues: %d}
  - {name: b, kind: userspace, interface: %s, ip: 10.89.0.1, io: afxdp, netns: %s}
routes:
%sadmin: {listen: ADMIN, control: ""}
`, queues, gwIf, gwNS, routes.String())
	runGatewayLoad(b, cfg, fmt.Sprintf("gateway-queues-afxdp-%d.pprof", queues), newBenchApp(b, "127.0.15.3"), targets, dial)
}

// gatewayLoadSessions, gatewayLoadWindow and gatewayLoadSize are the load
// runGatewayLoad puts through a gateway: 8 sessions, each keeping 8 RDMA
// WRITEs of 64 KiB outstanding.
const gatewayLoadSessions, gatewayLoadWindow, gatewayLoadSize = 8, 8, 64 << 10

// runGatewayLoad starts `rbridge run` on config yaml (its admin listen
// address ADMIN), connects gatewayLoadSessions sessions through it from
// client, session i to dial[i] and on to targets[i % len(targets)] (each
// listening on port 7471), and carries b.N WRITEs, reporting the gateway
// process's CPU per GB, its CPUs busy, and how its legs' receive loops
// shared the packets and the system calls they made (gatewayCounters). With RBRIDGE_BENCH_PROFILE=DIR the
// gateway writes its CPU profile to DIR/profile.
func runGatewayLoad(b *testing.B, yaml, profile string, client *benchApp, targets []*benchApp, dial []netip.AddrPort) {
	const sessions, window, size = gatewayLoadSessions, gatewayLoadWindow, gatewayLoadSize
	cfg := filepath.Join(b.TempDir(), "gw.yaml")
	admin := freeAddr(b)
	if err := os.WriteFile(cfg, []byte(strings.Replace(yaml, "ADMIN", `"`+admin+`"`, 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	args := []string{"run", "--config", cfg, "--log-level", "warn"}
	if dir := os.Getenv("RBRIDGE_BENCH_PROFILE"); dir != "" {
		args = append(args, "--cpu-profile", filepath.Join(dir, profile))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, target := range targets {
		ln, err := target.cm.Listen(7471, sessions)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				r, err := ln.Next(ctx)
				if err != nil {
					return
				}
				qp := target.qp(b)
				if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
					b.Error(err)
				}
				if _, err := r.Accept(ctx, cm.AcceptOptions{QP: qp}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	p := startRun(b, nil, args...)
	qps := make([]*transport.QP, sessions)
	for i := range qps {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			qps[i] = client.qp(b)
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			_, err := client.cm.Dial(dctx, dial[i], cm.DialOptions{QP: qps[i]})
			dcancel()
			if err == nil {
				break
			}
			qps[i].Close()
			if time.Now().After(deadline) {
				b.Fatalf("session %d through the gateway: %v", i, err)
			}
		}
	}
	post := func(i int, id uint64) {
		off := (i*window + int(id%window)) * size % (8<<20 - size)
		target := targets[i%len(targets)]
		if err := qps[i].PostSend(transport.SendWR{ID: uint64(i)<<32 | id, Opcode: transport.OpWrite, Local: transport.SGE{MR: client.mr, Offset: off, Length: size},
			Remote: target.mr.Addr() + uint64(off), RKey: target.mr.RKey(), Signaled: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(size)
	b.ResetTimer()
	cpu0, t0 := procCPU(b, p.cmd.Process.Pid), time.Now()
	posted, done := 0, 0
	next := make([]uint64, sessions)
	for i := range sessions {
		for range window {
			if posted < b.N {
				post(i, next[i])
				next[i]++
				posted++
			}
		}
	}
	wcs := make([]transport.WC, 64)
	for done < b.N {
		k, err := client.cq.PollWait(ctx, wcs)
		if err != nil {
			b.Fatalf("%d of %d WRITEs: %v", done, b.N, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != transport.StatusSuccess {
				b.Fatalf("WRITE %+v: %v", wc, wc.Status)
			}
			done++
			if posted < b.N {
				i := int(wc.ID >> 32)
				post(i, next[i])
				next[i]++
				posted++
			}
		}
	}
	el, cpu := time.Since(t0), procCPU(b, p.cmd.Process.Pid)-cpu0
	b.StopTimer()
	gb := float64(b.N) * size / 1e9
	b.ReportMetric(cpu.Seconds()/gb, "gw-cpu-s/GB")
	b.ReportMetric(cpu.Seconds()/el.Seconds(), "gw-cpus")
	gatewayCounters(b, admin, b.N)
	p.stop(b) // not killed: a CPU profile is written at the stop
}

// queueRx is a receive loop's packets and those it handed to another's QP,
// on the gateway's /metrics; legCalls a leg's system calls that moved
// packets (io: udp sendmmsg and recvmmsg, io: afxdp transmit kicks).
var (
	queueRx  = regexp.MustCompile(`(?m)^rbridge_leg_queue_(rx_packets|rx_foreign)_total\{leg="(\w+)",queue="(\d+)"\} (\S+)$`)
	legCalls = regexp.MustCompile(`(?m)^rbridge_(udp_tx_calls|udp_rx_calls|xdp_tx_kicks)_total\{leg="(\w+)"\} (\S+)$`)
)

// gatewayCounters reports, from the gateway's /metrics at admin, each
// leg's busiest receive loop's share of the leg's packets (LEG-top-loop: 1
// for one loop, 0.5 for two evenly loaded), the share of its packets that
// reached a loop other than their QP's (LEG-foreign), and its system calls
// that moved packets per WRITE of the ops carried (LEG-sends/op,
// LEG-reads/op; AF_XDP's transmit kicks are its sends, its receive waits
// are not counted here).
func gatewayCounters(b *testing.B, admin string, ops int) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	num := func(m []string) float64 {
		v, err := strconv.ParseFloat(m[len(m)-1], 64)
		if err != nil {
			b.Fatalf("/metrics: %s: %v", m[0], err)
		}
		return v
	}
	type legRx struct{ rx, foreign, top float64 }
	legs := map[string]*legRx{}
	for _, m := range queueRx.FindAllStringSubmatch(string(body), -1) {
		v := num(m)
		l := legs[m[2]]
		if l == nil {
			l = &legRx{}
			legs[m[2]] = l
		}
		if m[1] == "rx_foreign" {
			l.foreign += v
			continue
		}
		l.rx += v
		l.top = max(l.top, v)
	}
	if len(legs) == 0 {
		b.Fatalf("no receive loop's packets on the gateway's /metrics:\n%s", body)
	}
	for name, l := range legs {
		b.ReportMetric(l.top/max(l.rx, 1), name+"-top-loop")
		b.ReportMetric(l.foreign/max(l.rx, 1), name+"-foreign")
	}
	// Counted since the gateway started: the connections' few calls are
	// in too.
	for _, m := range legCalls.FindAllStringSubmatch(string(body), -1) {
		unit := "-sends/op"
		if m[1] == "udp_rx_calls" {
			unit = "-reads/op"
		}
		b.ReportMetric(num(m)/float64(ops), m[2]+unit)
	}
}
