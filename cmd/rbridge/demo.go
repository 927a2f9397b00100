package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

type demoOptions struct {
	addr     string
	size     int
	duration time.Duration
	jsonOut  bool
	tunnel   bool
	busyPoll bool
}

func newDemoCommand() *cobra.Command {
	o := demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a client, the gateway and a target in one process and show what crosses",
		Long: `demo runs rbridge's job on one machine, no RDMA hardware needed: a client
application, the gateway and a target application, each an RC queue pair of
rbridge's userspace RoCEv2 transport on its own UDP socket on loopback. The
gateway joins them with a session, as it joins an InfiniBand island to a
RoCEv2 fleet: the client reaches the target only through it.

It then:
  - sends every RC operation across (SEND, SEND_WITH_IMM, SEND_WITH_INV,
    RDMA WRITE, WRITE_WITH_IMM, RDMA READ, FETCH_ADD, COMPARE_SWAP) and a
    SEND back from the target, and checks every byte and result on the far
    side; one-sided operations carry the target's own address and rkey;
  - measures RDMA WRITEs of --size bytes, and 64-byte SEND round trips, for
    --duration each, straight from client to target and through the
    gateway, in the same run, and prints both and their ratio, with the
    process's CPU time per WRITE on each path (the client's and the
    target's, and through it the gateway's too: all three share this
    machine's CPUs, so where they keep them busy, the bandwidth ratio is
    about the inverse of the CPU ratio).

The gateway acknowledges nothing before the target completed it, so the
figures through it include the target's round trip.

With --tunnel the gateway is two gateways joined by their quic leg (a QUIC
connection on loopback with mutual TLS from a throwaway CA): the client's
gateway relays each operation over the tunnel, the target's gateway issues
it on its own leg, and the client is acknowledged only once the target
completed it.

With --busy-poll the gateway busy-polls, as a leg with busy_poll: true does:
one loop on an OS thread of its own reads both of its sockets without
waiting and polls its sessions' completion queues, and the relay runs on
that thread. It holds a CPU while operations cross the gateway, and naps
after 1 ms without any (as busy_poll_idle: 1ms), so that the direct
path's measurement, which runs first, has the CPUs a spinning loop would
take from the client and the target.`,
		Example: `  rbridge demo
  rbridge demo --size 4096 --duration 2s --json
  rbridge demo --tunnel
  rbridge demo --busy-poll`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return usageError(cmd, err)
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return runDemo(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1", "loopback address the four sockets bind (ports the kernel picks)")
	f.IntVar(&o.size, "size", 65536, "RDMA WRITE size for the throughput comparison, in bytes")
	f.DurationVar(&o.duration, "duration", time.Second, "how long each measurement runs (10ms to 1h)")
	f.BoolVar(&o.jsonOut, "json", false, "one JSON object instead of text")
	f.BoolVar(&o.tunnel, "tunnel", false, "two gateways joined by a QUIC tunnel instead of one gateway")
	f.BoolVar(&o.busyPoll, "busy-poll", false, "the gateway busy-polls its two sockets and CQs on one thread of its own (a CPU)")
	return cmd
}

func (o *demoOptions) check() error {
	a, err := netip.ParseAddr(o.addr)
	switch {
	case err != nil:
		return fmt.Errorf("--addr %q: %w", o.addr, err)
	case !a.IsLoopback():
		return fmt.Errorf("--addr %v: the demo runs on a loopback address (127.0.0.1, ::1)", a)
	case o.size < 1 || o.size > demoMem/4:
		return fmt.Errorf("--size %d: want 1 byte to %d", o.size, demoMem/4)
	case o.busyPoll && o.tunnel:
		return errors.New("--busy-poll with --tunnel: a quic leg does not busy-poll")
	}
	return checkDuration(o.duration)
}

// demoMem is the memory of each application (client, target).
const demoMem = 8 << 20

// demoApp is an application: an RC QP of the transport on its own socket,
// with memory peers may READ, WRITE and do atomics on.
type demoApp struct {
	dev    *transport.Device
	pd     *transport.PD
	mr     *transport.MR
	mem    []byte
	cq     *transport.CQ
	frames *pool.Pool // what its socket reads into
}

func (a *demoApp) close() {
	a.dev.Close()
	a.frames.Close()
}

// newDemoDevice makes a device on a UDP socket on addr; polled, no
// goroutine reads it (the gateway's loop does, with --busy-poll). Its
// socket reads into pl's 64 KiB buffers and lends them, as a userspace
// leg's does; it returns those buffers as frames.
func newDemoDevice(addr netip.Addr, polled bool, pl *pool.Pool, log *slog.Logger) (*transport.Device, *pool.Frames, error) {
	port, err := freeUDPPort(addr)
	if err != nil {
		return nil, nil, err
	}
	fr, err := pl.LendFrames(udpconn.FrameLen, 0.5)
	if err != nil {
		return nil, nil, err
	}
	c, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(addr, port), Frames: fr, Arena: pl.Arena()})
	if err != nil {
		return nil, nil, err
	}
	d, err := transport.NewDevice(c, transport.DeviceOptions{Logger: log, Polled: polled})
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return d, fr, nil
}

// freeUDPPort asks the kernel for a UDP port free on addr.
func freeUDPPort(addr netip.Addr) (uint16, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Port(), nil
}

func newDemoApp(addr netip.Addr, log *slog.Logger) (*demoApp, error) {
	// An application's socket lends its reads too (the same care as the
	// gateway's): 32 buffers of 64 KiB.
	pl, err := pool.New(pool.Options{Size: 32 * udpconn.FrameLen, Classes: []int{udpconn.FrameLen}})
	if err != nil {
		return nil, err
	}
	d, _, err := newDemoDevice(addr, false, pl, log)
	if err != nil {
		pl.Close()
		return nil, err
	}
	a := &demoApp{dev: d, pd: transport.NewPD(), mem: make([]byte, demoMem), cq: transport.NewCQ(4096), frames: pl}
	a.mr, err = a.pd.RegisterMR(a.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead|transport.AccessRemoteAtomic)
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *demoApp) newQP() (*transport.QP, error) {
	return a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: a.cq, RecvCQ: a.cq, MaxSendWR: 512, MaxRecvWR: 512})
}

// connectQPs connects two transport QPs as an out-of-band exchange of
// QPN, PSN and address would.
func connectQPs(a, b *transport.QP, aAddr, bAddr netip.AddrPort) error {
	for _, p := range []struct {
		qp, peer *transport.QP
		to       netip.AddrPort
		sq, rq   uint32
	}{{a, b, bAddr, 0x10, 0xfffff0}, {b, a, aAddr, 0xfffff0, 0x10}} {
		for _, at := range []transport.QPAttr{{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p.peer.QPN(), Remote: p.to, RQPSN: p.rq, PathMTU: 4096, MinRNRTimer: 1, MaxDestRdAtomic: 16},
			{State: transport.StateRTS, SQPSN: p.sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}} {
			if err := p.qp.Modify(at); err != nil {
				return err
			}
		}
	}
	return nil
}

// demoGateway is the gateway: two userspace legs and a session; with a
// tunnel, two gateways: the near leg's session relays to gateway A's end
// of the tunnel, and gateway B's session from its end to the far leg.
type demoGateway struct {
	near, far *transport.Device
	pool      *pool.Pool
	sess      *session.Session
	tun       *demoTunnel
	farSess   *session.Session // gateway B's, with a tunnel
	loop      *leg.SpinLoop    // with --busy-poll: reads near and far, and their endpoints' CQs
}

func (g *demoGateway) close() {
	if g.sess != nil {
		g.sess.Close()
	}
	if g.farSess != nil {
		g.farSess.Close()
	}
	if g.tun != nil {
		g.tun.close()
	}
	for _, d := range []*transport.Device{g.near, g.far} {
		if d != nil {
			d.Close()
		}
	}
	if g.loop != nil {
		g.loop.Close()
	}
	if g.pool != nil {
		g.pool.Close()
	}
}

// demoBusyPollIdle is the demo's busy-poll loop's busy_poll_idle.
const demoBusyPollIdle = time.Millisecond

// newDemoGateway connects client and target QPs through a session.
func newDemoGateway(ctx context.Context, addr netip.Addr, client, target *transport.QP, clientAddr, targetAddr netip.AddrPort, withTunnel, busyPoll bool, log *slog.Logger) (*demoGateway, error) {
	g := &demoGateway{}
	var err error
	if g.pool, err = pool.New(pool.Options{Size: 32 << 20, Classes: []int{256, 4 << 10, 64 << 10}}); err != nil {
		return nil, err
	}
	if busyPoll {
		// One loop for the gateway's two legs: one CPU, not two.
		// It naps while nothing crosses it: the direct path is measured
		// first, on CPUs the loop does not hold.
		g.loop = leg.NewSpinLoop(leg.Spin{CPU: -1, Idle: demoBusyPollIdle}, log)
	}
	var eps [2]*leg.UserspaceEndpoint
	for i, dev := range []**transport.Device{&g.near, &g.far} {
		var frames *pool.Frames
		if *dev, frames, err = newDemoDevice(addr, busyPoll, g.pool, log); err != nil {
			g.close()
			return nil, err
		}
		if g.loop != nil {
			d := *dev
			g.loop.Add(func() bool {
				n, err := d.Poll()
				if err != nil && !errors.Is(err, roce.ErrConnClosed) { // closed: the gateway is closing
					log.Warn("gateway: read packets", "err", err)
				}
				return n > 0
			})
		}
		pd := transport.NewPD()
		mr, err := pd.RegisterMR(g.pool.Arena(), transport.AccessLocalWrite)
		if err != nil {
			g.close()
			return nil, err
		}
		if eps[i], err = leg.NewUserspaceEndpoint(leg.UserspaceOptions{Device: *dev, PD: pd, MR: mr, Frames: frames, Loop: g.loop}); err != nil {
			g.close()
			return nil, err
		}
	}
	if err := connectQPs(client, eps[0].QP(), clientAddr, g.near.LocalAddr()); err != nil {
		g.close()
		return nil, err
	}
	if err := connectQPs(eps[1].QP(), target, g.far.LocalAddr(), targetAddr); err != nil {
		g.close()
		return nil, err
	}
	var far session.Endpoint = eps[1]
	if withTunnel {
		if g.tun, err = newDemoTunnel(ctx, addr, g.pool, log); err != nil {
			g.close()
			return nil, fmt.Errorf("tunnel: %w", err)
		}
		if g.farSess, err = session.New(session.Options{A: g.tun.b, B: eps[1], Pool: g.pool, Logger: log}); err != nil {
			g.close()
			return nil, err
		}
		far = g.tun.a
	}
	if g.sess, err = session.New(session.Options{A: eps[0], B: far, Pool: g.pool, Logger: log}); err != nil {
		g.close()
		return nil, err
	}
	return g, nil
}

// demoCrossing is one operation that crossed the gateway, as checked.
type demoCrossing struct {
	Op     string `json:"op"`
	Bytes  int    `json:"bytes"`
	Way    string `json:"way"`
	Result string `json:"result"`
}

// demoRun is the measurement of one path.
type demoRun struct {
	Path      string  `json:"path"`
	Writes    uint64  `json:"writes"`
	MBPerS    float64 `json:"write_mb_per_s"`
	RoundTrip float64 `json:"send_round_trip_us"`
	// WriteCPU is the process's CPU time per WRITE while the path's
	// WRITEs ran, in microseconds: the client's, the target's and, through,
	// the gateway's (0 where it cannot be read); CPUsBusy how many CPUs
	// that kept busy on average.
	WriteCPU float64 `json:"write_cpu_us"`
	CPUsBusy float64 `json:"write_cpus_busy"`
}

type demoReport struct {
	Client   string         `json:"client"`
	Gateway  [2]string      `json:"gateway"`
	Tunnel   string         `json:"tunnel,omitempty"`    // with --tunnel: the QUIC connection between the two gateways
	BusyPoll string         `json:"busy_poll,omitempty"` // with --busy-poll: the gateway's loop's thread
	Target   string         `json:"target"`
	Crossed  []demoCrossing `json:"crossed"`
	Session  demoSession    `json:"session"`
	WriteB   int            `json:"write_bytes"`
	Direct   demoRun        `json:"direct"`
	Through  demoRun        `json:"through"`
	BWRatio  float64        `json:"through_vs_direct_bandwidth"`
	LatRatio float64        `json:"through_vs_direct_round_trip"`
	// CPURatio is through's CPU per WRITE over direct's.
	CPURatio float64 `json:"through_vs_direct_write_cpu,omitempty"`
}

type demoSession struct {
	Ops    [2]uint64 `json:"ops"`
	Bytes  [2]uint64 `json:"bytes"`
	Copied [2]uint64 `json:"copied_bytes"`
}

func runDemo(ctx context.Context, o demoOptions, out, progress io.Writer) error {
	log := slog.New(slog.NewTextHandler(progress, &slog.HandlerOptions{Level: slog.LevelWarn}))
	addr := netip.MustParseAddr(o.addr)
	client, err := newDemoApp(addr, log)
	if err != nil {
		return fmt.Errorf("demo: client: %w", err)
	}
	defer client.close()
	target, err := newDemoApp(addr, log)
	if err != nil {
		return fmt.Errorf("demo: target: %w", err)
	}
	defer target.close()
	cq, err := client.newQP()
	if err != nil {
		return err
	}
	tq, err := target.newQP()
	if err != nil {
		return err
	}
	g, err := newDemoGateway(ctx, addr, cq, tq, client.dev.LocalAddr(), target.dev.LocalAddr(), o.tunnel, o.busyPoll, log)
	if err != nil {
		return fmt.Errorf("demo: gateway: %w", err)
	}
	defer g.close()
	r := demoReport{Client: client.dev.LocalAddr().String(), Target: target.dev.LocalAddr().String(),
		Gateway: [2]string{g.near.LocalAddr().String(), g.far.LocalAddr().String()}, WriteB: o.size}
	if g.tun != nil {
		r.Tunnel = fmt.Sprintf("%v -> %v", g.tun.conn.LocalAddr(), g.tun.conn.RemoteAddr())
	}
	if g.loop != nil {
		r.BusyPoll = g.loop.Describe()
	}
	if !o.jsonOut {
		if g.tun != nil {
			fmt.Fprintf(out, "rbridge demo: client %s -> gateway A %s | QUIC %s | gateway B %s -> target %s\n", r.Client, r.Gateway[0], r.Tunnel, r.Gateway[1], r.Target)
			fmt.Fprintf(out, "  (two gateways joined by their quic leg, mutual TLS; RoCE on both ends: rbridge's userspace transport on UDP sockets on loopback)\n")
		} else {
			fmt.Fprintf(out, "rbridge demo: client %s -> gateway %s | %s -> target %s\n", r.Client, r.Gateway[0], r.Gateway[1], r.Target)
			fmt.Fprintf(out, "  (rbridge's userspace RoCEv2 transport on UDP sockets on loopback; the client reaches the target only through the gateway)\n")
		}
		if g.loop != nil {
			fmt.Fprintf(out, "  the gateway busy-polls: one loop reads both its sockets and its sessions' CQs on %s, holding a CPU while operations cross it\n", r.BusyPoll)
		}
	}
	if r.Crossed, err = demoCrossings(ctx, client, target, cq, tq); err != nil {
		return fmt.Errorf("demo: across the gateway: %w", err)
	}
	st := g.sess.Stats().Snapshot()
	for i := range 2 {
		r.Session.Ops[i], r.Session.Bytes[i], r.Session.Copied[i] = st.TotalOps(i), st.TotalBytes(i), st.Copied[i]
	}
	if !o.jsonOut {
		for _, c := range r.Crossed {
			fmt.Fprintf(out, "crossed  %-22s %7d B  %-18s %s\n", c.Op, c.Bytes, c.Way, c.Result)
		}
		// The counts are the session's on the gateway the client reaches
		// (gateway A with --tunnel: what gateway B copies is its own), by
		// who asked: a READ's bytes are the client's, though they come back.
		whose := "the gateway's session"
		if o.tunnel {
			whose = "gateway A's session"
		}
		fmt.Fprintf(out, "%s: the client's %d ops named %d bytes (a READ's among them); the target's %d ops, %d bytes; %d bytes copied into its pool\n",
			whose, r.Session.Ops[0], r.Session.Bytes[0], r.Session.Ops[1], r.Session.Bytes[1], r.Session.Copied[0]+r.Session.Copied[1])
		fmt.Fprintf(out, "measuring %d-byte RDMA WRITEs and 64-byte SEND round trips, %v each, direct and through the gateway...\n", o.size, o.duration)
	}

	// The direct path: a second pair of QPs, straight between the two.
	dc, err := client.newQP()
	if err != nil {
		return err
	}
	dt, err := target.newQP()
	if err != nil {
		return err
	}
	if err := connectQPs(dc, dt, client.dev.LocalAddr(), target.dev.LocalAddr()); err != nil {
		return err
	}
	for _, p := range []struct {
		run    *demoRun
		name   string
		c, t   *transport.QP
		target *demoApp
	}{{&r.Direct, "direct", dc, dt, target}, {&r.Through, "through", cq, tq, target}} {
		p.run.Path = p.name
		cpu := startCPU()
		n, secs, err := demoWrites(ctx, client, target, p.c, o.size, o.duration)
		if err != nil {
			return fmt.Errorf("demo: %s WRITEs: %w", p.name, err)
		}
		p.run.Writes, p.run.MBPerS = n, float64(n)*float64(o.size)/secs/1e6
		if c := cpu.per(n, time.Duration(secs*float64(time.Second))); c != nil {
			p.run.WriteCPU, p.run.CPUsBusy = c.total(), c.CPUsBusy
		}
		rt, err := demoRoundTrips(ctx, client, target, p.c, p.t, o.duration)
		if err != nil {
			return fmt.Errorf("demo: %s round trips: %w", p.name, err)
		}
		p.run.RoundTrip = rt.Seconds() * 1e6
	}
	if r.Direct.MBPerS > 0 {
		r.BWRatio = r.Through.MBPerS / r.Direct.MBPerS
	}
	if r.Direct.RoundTrip > 0 {
		r.LatRatio = r.Through.RoundTrip / r.Direct.RoundTrip
	}
	if r.Direct.WriteCPU > 0 && r.Through.WriteCPU > 0 {
		r.CPURatio = r.Through.WriteCPU / r.Direct.WriteCPU
	}
	if o.jsonOut {
		e := json.NewEncoder(out)
		e.SetIndent("", "  ")
		e.SetEscapeHTML(false) // "client -> target", not \u003e
		return e.Encode(r)
	}
	fmt.Fprintf(out, "%-8s %10s %14s %16s %20s\n", "path", "writes", "write MB/s", "SEND round trip", "CPU per write")
	for _, run := range []demoRun{r.Direct, r.Through} {
		fmt.Fprintf(out, "%-8s %10d %14.1f %13.1f us %8.1f us (%.1f CPUs)\n", run.Path, run.Writes, run.MBPerS, run.RoundTrip, run.WriteCPU, run.CPUsBusy)
	}
	fmt.Fprintf(out, "through/direct: bandwidth %.2f, round trip %.2f", r.BWRatio, r.LatRatio)
	if r.CPURatio > 0 {
		fmt.Fprintf(out, ", CPU per write %.2f", r.CPURatio)
	}
	fmt.Fprintln(out)
	return nil
}

func waitOne(ctx context.Context, cq *transport.CQ) (transport.WC, error) {
	var wc [1]transport.WC
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		return transport.WC{}, err
	}
	if wc[0].Status != transport.StatusSuccess {
		return wc[0], fmt.Errorf("work request %d: %v", wc[0].ID, wc[0].Status)
	}
	return wc[0], nil
}

// demoCrossings sends every RC operation from the client to the target
// through the gateway, and a SEND back, checking each on the far side.
func demoCrossings(ctx context.Context, c, t *demoApp, cq, tq *transport.QP) ([]demoCrossing, error) {
	cm, tm := c.mem, t.mem
	for i := range 1 << 20 {
		cm[i] = byte(i*7 + i>>9)
		tm[4<<20+i] = byte(i*13 + 5)
	}
	binary.LittleEndian.PutUint64(tm[6<<20:], 1000)
	binary.LittleEndian.PutUint64(tm[6<<20+8:], 7)
	sge := func(off, n int) transport.SGE { return transport.SGE{MR: c.mr, Offset: off, Length: n} }
	rsge := func(off, n int) transport.SGE { return transport.SGE{MR: t.mr, Offset: off, Length: n} }
	ta, rk := t.mr.Addr(), t.mr.RKey()
	steps := []struct {
		wr    transport.SendWR
		check func(recv transport.WC) string
	}{
		{transport.SendWR{Opcode: transport.OpSend, Local: sge(0, 5000)}, func(w transport.WC) string {
			return same(tm[1<<20:1<<20+5000], cm[:5000], w.ByteLen == 5000)
		}},
		{transport.SendWR{Opcode: transport.OpSendWithImm, Local: sge(100, 64), Imm: 0xc0ffee}, func(w transport.WC) string {
			return same(tm[1<<20:1<<20+64], cm[100:164], w.HasImm && w.Imm == 0xc0ffee)
		}},
		{transport.SendWR{Opcode: transport.OpSendWithInv, Local: sge(200, 64), InvRKey: 0x1234}, func(w transport.WC) string {
			return same(tm[1<<20:1<<20+64], cm[200:264], w.HasInv && w.InvRKey == 0x1234)
		}},
		{transport.SendWR{Opcode: transport.OpWrite, Local: sge(0, 200000), Remote: ta + 2<<20, RKey: rk}, func(transport.WC) string {
			return same(tm[2<<20:2<<20+200000], cm[:200000], true)
		}},
		{transport.SendWR{Opcode: transport.OpWriteWithImm, Local: sge(0, 100), Remote: ta + 3<<20, RKey: rk, Imm: 77}, func(w transport.WC) string {
			return same(tm[3<<20:3<<20+100], cm[:100], w.HasImm && w.Imm == 77)
		}},
		{transport.SendWR{Opcode: transport.OpRead, Local: sge(1<<20, 60000), Remote: ta + 4<<20, RKey: rk}, func(transport.WC) string {
			return same(cm[1<<20:1<<20+60000], tm[4<<20:4<<20+60000], true)
		}},
		{transport.SendWR{Opcode: transport.OpFetchAdd, Local: sge(2<<20, 8), Remote: ta + 6<<20, RKey: rk, SwapAdd: 5}, func(transport.WC) string {
			got, now := binary.LittleEndian.Uint64(cm[2<<20:]), binary.LittleEndian.Uint64(tm[6<<20:])
			return verdict(got == 1000 && now == 1005, fmt.Sprintf("returned %d, target now %d", got, now))
		}},
		{transport.SendWR{Opcode: transport.OpCompareSwap, Local: sge(2<<20+8, 8), Remote: ta + 6<<20 + 8, RKey: rk, Compare: 7, SwapAdd: 99}, func(transport.WC) string {
			got, now := binary.LittleEndian.Uint64(cm[2<<20+8:]), binary.LittleEndian.Uint64(tm[6<<20+8:])
			return verdict(got == 7 && now == 99, fmt.Sprintf("returned %d, target now %d", got, now))
		}},
	}
	var out []demoCrossing
	for i, s := range steps {
		wr := s.wr
		wr.ID, wr.Signaled = uint64(i), true
		receives := wr.Opcode == transport.OpSend || wr.Opcode == transport.OpSendWithImm || wr.Opcode == transport.OpSendWithInv || wr.Opcode == transport.OpWriteWithImm
		if receives {
			if err := tq.PostRecv(transport.RecvWR{ID: uint64(i), Local: rsge(1<<20, 1<<20)}); err != nil {
				return nil, err
			}
		}
		if err := cq.PostSend(wr); err != nil {
			return nil, err
		}
		if _, err := waitOne(ctx, c.cq); err != nil {
			return nil, fmt.Errorf("%v: %w", wr.Opcode, err)
		}
		var recv transport.WC
		if receives {
			var err error
			if recv, err = waitOne(ctx, t.cq); err != nil {
				return nil, fmt.Errorf("%v at the target: %w", wr.Opcode, err)
			}
		}
		res := s.check(recv)
		if res != "ok" && !bytes.HasPrefix([]byte(res), []byte("ok ")) {
			return nil, fmt.Errorf("%v: %s", wr.Opcode, res)
		}
		out = append(out, demoCrossing{Op: wr.Opcode.String(), Bytes: wr.Local.Length, Way: "client -> target", Result: res})
	}
	// The target answers with a SEND: it crosses back.
	if err := cq.PostRecv(transport.RecvWR{ID: 99, Local: sge(3<<20, 8192)}); err != nil {
		return nil, err
	}
	if err := tq.PostSend(transport.SendWR{ID: 99, Opcode: transport.OpSendWithImm, Imm: 42, Local: rsge(4<<20, 3000), Signaled: true}); err != nil {
		return nil, err
	}
	if _, err := waitOne(ctx, t.cq); err != nil {
		return nil, fmt.Errorf("the target's SEND: %w", err)
	}
	w, err := waitOne(ctx, c.cq)
	if err != nil {
		return nil, fmt.Errorf("the target's SEND at the client: %w", err)
	}
	res := same(cm[3<<20:3<<20+3000], tm[4<<20:4<<20+3000], w.ByteLen == 3000 && w.HasImm && w.Imm == 42)
	if res != "ok" {
		return nil, fmt.Errorf("the target's SEND: %s", res)
	}
	return append(out, demoCrossing{Op: "SEND_WITH_IMM", Bytes: 3000, Way: "target -> client", Result: res}), nil
}

func same(got, want []byte, meta bool) string {
	switch {
	case !bytes.Equal(got, want):
		return "FAILED: the bytes differ"
	case !meta:
		return "FAILED: length, immediate or invalidated rkey differ"
	}
	return "ok"
}

func verdict(ok bool, what string) string {
	if ok {
		return "ok (" + what + ")"
	}
	return "FAILED: " + what
}

// demoWrites posts WRITEs of size bytes for d, 16 outstanding, and returns
// how many completed in how many seconds.
func demoWrites(ctx context.Context, c, t *demoApp, qp *transport.QP, size int, d time.Duration) (uint64, float64, error) {
	const window = 16
	wcs := make([]transport.WC, window)
	start := time.Now()
	deadline := start.Add(d)
	var done uint64
	out := 0
	for i := 0; ; i++ {
		for out >= window || (out > 0 && !time.Now().Before(deadline)) {
			n, err := c.cq.PollWait(ctx, wcs)
			if err != nil {
				return 0, 0, err
			}
			for _, wc := range wcs[:n] {
				if wc.Status != transport.StatusSuccess {
					return 0, 0, fmt.Errorf("WRITE %d: %v", wc.ID, wc.Status)
				}
			}
			out -= n
			done += uint64(n)
		}
		if !time.Now().Before(deadline) {
			break
		}
		off := (i % 4) * size
		if err := qp.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
			Local: transport.SGE{MR: c.mr, Offset: off, Length: size}, Remote: t.mr.Addr() + uint64(off), RKey: t.mr.RKey()}); err != nil {
			return 0, 0, err
		}
		out++
	}
	return done, time.Since(start).Seconds(), nil
}

// demoRoundTrips ping-pongs 64-byte SENDs between client and target for d
// and returns the mean round trip: as ib_send_lat, each side sends as the
// other's SEND arrives, and a SEND's own completion (its peer's ACK) is
// taken when it comes, not waited for before the next ping.
func demoRoundTrips(ctx context.Context, c, t *demoApp, cq, tq *transport.QP, d time.Duration) (time.Duration, error) {
	sge := func(a *demoApp) transport.SGE { return transport.SGE{MR: a.mr, Offset: 7 << 20, Length: 64} }
	// pending counts each side's SENDs whose completions were not taken.
	pending := map[*transport.CQ]int{}
	// recv waits on q for a receive's completion, taking the send
	// completions that come before it.
	recv := func(q *transport.CQ) error {
		for {
			wc, err := waitOne(ctx, q)
			if err != nil {
				return err
			}
			if wc.Opcode == transport.OpRecv {
				return nil
			}
			pending[q]--
		}
	}
	start := time.Now()
	n := 0
	var end time.Time
	for {
		if err := tq.PostRecv(transport.RecvWR{Local: sge(t)}); err != nil {
			return 0, err
		}
		if err := cq.PostRecv(transport.RecvWR{Local: sge(c)}); err != nil {
			return 0, err
		}
		if err := cq.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: sge(c), Signaled: true}); err != nil {
			return 0, err
		}
		pending[c.cq]++
		if err := recv(t.cq); err != nil { // the ping arrived
			return 0, err
		}
		if err := tq.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: sge(t), Signaled: true}); err != nil {
			return 0, err
		}
		pending[t.cq]++
		if err := recv(c.cq); err != nil { // the pong arrived
			return 0, err
		}
		n++
		if end = time.Now(); end.Sub(start) >= d {
			break
		}
	}
	// The last SENDs' completions: taken, not timed.
	for q, k := range pending {
		for range k {
			if _, err := waitOne(ctx, q); err != nil {
				return 0, err
			}
		}
	}
	return end.Sub(start) / time.Duration(n), nil
}
