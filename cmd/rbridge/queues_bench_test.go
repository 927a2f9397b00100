package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/testlog"
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
	a := &benchApp{pd: transport.NewPD(), cq: transport.NewCQ(4096)}
	uc, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr(ip), roce.Port)})
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
	const sessions, window, size = 8, 8, 64 << 10
	// 127.0.15.0/24: this benchmark's own addresses.
	cfg := filepath.Join(b.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.15.1, io: udp, queues: %d}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.15.2, io: udp, queues: %d}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.15.1:7471"}
    target: {leg: b, addr: "127.0.15.4:7471"}
admin: {listen: "127.0.0.1:0", control: ""}
`, queues, queues)), 0o644); err != nil {
		b.Fatal(err)
	}
	client, target := newBenchApp(b, "127.0.15.3"), newBenchApp(b, "127.0.15.4")
	ln, err := target.cm.Listen(7471, sessions)
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"run", "--config", cfg, "--log-level", "warn"}
	if dir := os.Getenv("RBRIDGE_BENCH_PROFILE"); dir != "" {
		args = append(args, "--cpu-profile", filepath.Join(dir, fmt.Sprintf("gateway-queues-%d.pprof", queues)))
	}
	p := startRun(b, nil, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
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
	qps := make([]*transport.QP, sessions)
	for i := range qps {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			qps[i] = client.qp(b)
			dctx, dcancel := context.WithTimeout(ctx, time.Second)
			_, err := client.cm.Dial(dctx, netip.MustParseAddrPort("127.0.15.1:7471"), cm.DialOptions{QP: qps[i]})
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
	p.stop(b) // not killed: a CPU profile is written at the stop
}
