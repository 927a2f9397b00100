package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/internal/udpbaseline"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

type benchOptions struct {
	size, window, mtu int
	duration          time.Duration
	jsonOut           bool
	addrA, addrB      string
	port              int
	offload, lend     bool
}

func newBenchCommand() *cobra.Command {
	o := benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the userspace RoCEv2 transport against plain UDP, in one run",
		Long: `bench measures a whole path and reports it as a ratio to the obvious
alternative, measured in the same run on the same machine:

  transport  RDMA WRITEs of --size bytes between two of rbridge's userspace RC
             queue pairs over UDP sockets (RoCEv2, on --port), --window
             messages outstanding, the free ones posted as one list; every
             message acknowledged end to end
  udp        the same bytes in --mtu-byte datagrams through plain UDP sockets,
             batched as the transport batches (sendmmsg and recvmmsg, 64 a
             call), the same window (and at most 512 datagrams in flight,
             as the transport's packets), no reliability at all

Both paths' sockets use the kernel's UDP batching where it has it, GSO
(a run of datagrams to one peer in one send) and GRO (datagrams that
arrived together in one read); --offload=false measures them without.
The transport's sockets read with GRO into 64 KiB buffers of a memory
pool and lend each packet to the transport where it landed, as a
gateway's userspace leg does; --lend=false copies each out instead.
Each path's line of cost says what it took per message on each side:
system calls, the sends and reads they held, and the packets. Then the
CPU time per message of the whole process (both sides, in user space and
in the kernel) while each path ran, and how many CPUs that kept busy: a
path that keeps the CPUs busy is bound by its CPU per message, one that
does not by its round trips (a larger --window shows which).

Both run on loopback between two addresses of one family (127.0.0.1 and
127.0.0.2 by default, each on --port, 4791 by default), for --duration
each, the transport first. At the deadline the message on the wire may
finish; the rest of the window is not waited for. A run too short for one
message to complete is an error. A line of progress goes to standard error
every second.

Message memory is mapped outside the Go heap: eight messages per side, as
many as fit in 64 MiB for larger ones, at least one. A 1 GiB --size takes
1 GiB per side, and a size that the machine, the cgroup or ulimit -v cannot
hold is refused with that limit.

It measures the transport alone; rbridge demo measures a path through the
gateway against the direct one, and docs/performance.md has the gateway's
figures between real devices.`,
		Example: `  rbridge bench --size 65536 --duration 5s
  rbridge bench --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return usageError(cmd, err)
			}
			return runBench(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.size, "size", 4096, "message size in bytes")
	f.IntVar(&o.window, "window", 32, "messages outstanding")
	f.IntVar(&o.mtu, "mtu", 4096, "path MTU (256, 512, 1024, 2048 or 4096); also the plain UDP datagram size")
	f.DurationVar(&o.duration, "duration", 3*time.Second, "how long each measurement runs (10ms to 1h)")
	f.BoolVar(&o.jsonOut, "json", false, "one JSON object instead of text")
	f.StringVar(&o.addrA, "from", "127.0.0.1", "local address of the sending side")
	f.StringVar(&o.addrB, "to", "127.0.0.2", "local address of the receiving side")
	f.IntVar(&o.port, "port", int(roce.Port), "UDP port of both sides, on each address")
	f.BoolVar(&o.offload, "offload", true, "the kernel's UDP batching (GSO and GRO) on both paths' sockets")
	f.BoolVar(&o.lend, "lend", true, "the transport's sockets lend their GRO reads from a memory pool instead of copying them out (needs --offload)")
	return cmd
}

// checkDuration checks a measurement's --duration (bench, demo): shorter
// than 10 ms measures the clock and the scheduler more than the path, and
// longer than an hour is a unit mistyped.
func checkDuration(d time.Duration) error {
	if d < 10*time.Millisecond || d > time.Hour {
		return fmt.Errorf("--duration %v: want 10ms to 1h", d)
	}
	return nil
}

func (o *benchOptions) check() error {
	switch {
	case o.size < 1 || o.size > 1<<30:
		return fmt.Errorf("--size %d: want 1 byte to 1 GiB", o.size)
	case o.window < 1 || o.window > 1024:
		return fmt.Errorf("--window %d: want 1 to 1024", o.window)
	case o.port < 1 || o.port > 65535:
		return fmt.Errorf("--port %d: want 1 to 65535", o.port)
	}
	if err := checkDuration(o.duration); err != nil {
		return err
	}
	switch o.mtu {
	case 256, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("--mtu %d: want 256, 512, 1024, 2048 or 4096", o.mtu)
	}
	var addrs [2]netip.Addr
	for i, a := range []string{o.addrA, o.addrB} {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return fmt.Errorf("address %q: %w", a, err)
		}
		addrs[i] = ip.Unmap()
	}
	switch a, b := addrs[0], addrs[1]; {
	case a.Is4() != b.Is4():
		return fmt.Errorf("--from %s and --to %s: one is IPv4 and the other IPv6; both sides need addresses of one family", o.addrA, o.addrB)
	case a == b:
		return fmt.Errorf("--from and --to are both %s: the two sides need two addresses", o.addrA)
	}
	return nil
}

// benchResult is one measurement.
type benchResult struct {
	Path     string  `json:"path"`
	Messages uint64  `json:"messages"`
	Seconds  float64 `json:"seconds"`
	MsgsPerS float64 `json:"msgs_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	Lost     uint64  `json:"lost,omitempty"`
	// Offload is the sockets' (the sending side's): "gso on, gro on".
	Offload string `json:"offload"`
	// Lends says the transport's sockets lent what they read.
	Lends bool `json:"lends,omitempty"`
	// Sender and Receiver are what the path took per message on each
	// side (the transport's receiver sends its ACKs).
	Sender   benchCost `json:"sender"`
	Receiver benchCost `json:"receiver"`
	// CPU is what the process used while the path ran (both sides are
	// in it; absent where it cannot be read).
	CPU *benchCPU `json:"cpu,omitempty"`
}

// benchCPU is the process's CPU time per message while one path ran, in
// user space and in the kernel (both sides and the loopback between
// them), and how many CPUs that kept busy on average. A path that keeps
// the machine's CPUs busy is bound by its CPU per message; one that does
// not, by its round trips.
type benchCPU struct {
	UserUSPerMsg   float64 `json:"user_us_per_msg"`
	SystemUSPerMsg float64 `json:"system_us_per_msg"`
	CPUsBusy       float64 `json:"cpus_busy"`
}

// cpuMeter reads the process's CPU time at the start of a path's run.
type cpuMeter struct {
	user, system time.Duration
	ok           bool
}

func startCPU() cpuMeter {
	u, s, ok := processCPU()
	return cpuMeter{u, s, ok}
}

// per is the CPU used since m per message of msgs, over wall.
func (m cpuMeter) per(msgs uint64, wall time.Duration) *benchCPU {
	u, s, ok := processCPU()
	if !m.ok || !ok || msgs == 0 || wall <= 0 {
		return nil
	}
	du, ds := u-m.user, s-m.system
	n := float64(msgs)
	return &benchCPU{UserUSPerMsg: float64(du.Microseconds()) / n, SystemUSPerMsg: float64(ds.Microseconds()) / n,
		CPUsBusy: (du + ds).Seconds() / wall.Seconds()}
}

// total is the CPU per message, user and kernel.
func (c *benchCPU) total() float64 { return c.UserUSPerMsg + c.SystemUSPerMsg }

// benchCost is one side's system calls per message, the sends and reads
// they held (a datagram each, or a GSO send or GRO read of several) and
// the packets (datagrams on the wire).
type benchCost struct {
	SendCalls  float64 `json:"sendmmsg"`
	RecvCalls  float64 `json:"recvmmsg"`
	Sends      float64 `json:"sends"`
	Reads      float64 `json:"reads"`
	PacketsOut float64 `json:"packets_out"`
	PacketsIn  float64 `json:"packets_in"`
}

// perMessage divides a conn's counters by the messages moved.
func perMessage(s udpconn.StatsSnapshot, msgs uint64) benchCost {
	m := float64(max(msgs, 1))
	return benchCost{SendCalls: float64(s.TxCalls) / m, RecvCalls: float64(s.RxCalls) / m, Sends: float64(s.TxBuffers) / m,
		Reads: float64(s.RxBuffers) / m, PacketsOut: float64(s.TxPackets) / m, PacketsIn: float64(s.RxPackets) / m}
}

func runBench(ctx context.Context, o benchOptions, out, progress io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	tr, err := benchTransport(ctx, o, progress)
	if err == nil {
		err = tr.measured(o)
	}
	if err != nil {
		return fmt.Errorf("bench transport: %w", err)
	}
	ud, err := benchUDP(ctx, o, progress)
	if err == nil {
		err = ud.measured(o)
	}
	if err != nil {
		return fmt.Errorf("bench udp: %w", err)
	}
	ratio := tr.MBPerS / ud.MBPerS
	if o.jsonOut {
		return json.NewEncoder(out).Encode(map[string]any{
			"size": o.size, "window": o.window, "mtu": o.mtu,
			"results": []benchResult{tr, ud}, "ratio": ratio,
		})
	}
	fmt.Fprintf(out, "%-10s %12s %12s %12s\n", "path", "msgs/s", "MB/s", "messages")
	for _, r := range []benchResult{tr, ud} {
		fmt.Fprintf(out, "%-10s %12.0f %12.1f %12d\n", r.Path, r.MsgsPerS, r.MBPerS, r.Messages)
	}
	fmt.Fprintf(out, "transport/udp: %.2f (%d-byte messages, %d outstanding, MTU %d)\n", ratio, o.size, o.window, o.mtu)
	fmt.Fprintf(out, "per message  %-9s %9s %9s %9s %9s %9s %9s\n", "side", "sendmmsg", "recvmmsg", "sends", "reads", "pkts out", "pkts in")
	for _, r := range []benchResult{tr, ud} {
		for _, side := range []struct {
			name string
			c    benchCost
		}{{"sender", r.Sender}, {"receiver", r.Receiver}} {
			c := side.c
			fmt.Fprintf(out, "%-12s %-9s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", r.Path, side.name, c.SendCalls, c.RecvCalls, c.Sends, c.Reads, c.PacketsOut, c.PacketsIn)
		}
	}
	lends := "copied out of the socket's buffers"
	if tr.Lends {
		lends = "lent where they landed"
	}
	fmt.Fprintf(out, "offload: transport %s, its reads %s; udp %s\n", tr.Offload, lends, ud.Offload)
	if tr.CPU != nil && ud.CPU != nil {
		fmt.Fprintf(out, "CPU, the process (both sides)  %9s %9s %9s %9s\n", "us/msg", "user", "kernel", "CPUs busy")
		for _, r := range []benchResult{tr, ud} {
			fmt.Fprintf(out, "%-30s %9.2f %9.2f %9.2f %9.2f\n", r.Path, r.CPU.total(), r.CPU.UserUSPerMsg, r.CPU.SystemUSPerMsg, r.CPU.CPUsBusy)
		}
		fmt.Fprintf(out, "transport/udp CPU per message: %.2f\n", tr.CPU.total()/max(ud.CPU.total(), 1e-9))
	}
	if ud.Lost > 0 {
		fmt.Fprintf(out, "udp lost %d datagrams: its figure counts only what arrived\n", ud.Lost)
	}
	return nil
}

// ticker reports progress once a second until stopped; stop returns once
// the last line is written.
func ticker(progress io.Writer, what string, count func() uint64) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				fmt.Fprintf(progress, "bench %s: %d messages in %.0fs\n", what, count(), now.Sub(start).Seconds())
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// benchSlots is how many message buffers each side of the transport
// cycles through: eight, fewer when eight would pass benchSlotBudget.
const (
	benchSlots      = 8
	benchSlotBudget = 64 << 20
)

func benchTransport(ctx context.Context, o benchOptions, progress io.Writer) (benchResult, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type side struct {
		dev    *transport.Device
		qp     *transport.QP
		mr     *transport.MR
		cq     *transport.CQ
		c      *udpconn.Conn
		arena  *pool.Arena
		frames *pool.Pool // what the socket reads into and lends (--lend)
	}
	// Message memory comes from an mmap'd arena, not the Go heap: a 1 GiB
	// message is 1 GiB per side, populated up front, and a size the machine
	// cannot hold is refused with the limit it hit.
	slots := min(benchSlots, max(1, benchSlotBudget/o.size))
	var sides []*side
	defer func() {
		// Both devices before either arena: once a device's Close returns
		// nothing touches its MRs, and a side's MR is the peer's target.
		for _, s := range sides {
			if s.dev != nil {
				s.dev.Close()
			} else if s.c != nil {
				s.c.Close()
			}
		}
		for _, s := range sides {
			s.arena.Close()
			if s.frames != nil {
				s.frames.Close()
			}
		}
	}()
	open := func(ip string) (*side, error) {
		a, err := pool.MapArena(slots*o.size, pool.ArenaOptions{})
		if err != nil {
			return nil, fmt.Errorf("--size %d: message memory for %s: %w", o.size, ip, err)
		}
		s := &side{cq: transport.NewCQ(2 * o.window), arena: a}
		sides = append(sides, s)
		uo := udpconn.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(o.port)), NoGSO: !o.offload, NoGRO: !o.offload, Logger: quiet}
		if o.lend && o.offload {
			// 32 buffers of 64 KiB: a read takes at most 8, and the
			// transport hands each back after its batch.
			if s.frames, err = pool.New(pool.Options{Size: 32 * udpconn.FrameLen, Classes: []int{udpconn.FrameLen}}); err != nil {
				return nil, fmt.Errorf("the socket's buffers for %s: %w", ip, err)
			}
			fr, err := s.frames.LendFrames(udpconn.FrameLen, 0)
			if err != nil {
				return nil, err
			}
			uo.Frames, uo.Arena = fr, s.frames.Arena()
		}
		if s.c, err = udpconn.Listen(uo); err != nil {
			return nil, err
		}
		if s.dev, err = transport.NewDevice(s.c, transport.DeviceOptions{Logger: quiet}); err != nil {
			return nil, err
		}
		pd := transport.NewPD()
		if s.mr, err = pd.RegisterMR(a.Bytes(), transport.AccessLocalWrite|transport.AccessRemoteWrite); err != nil {
			return nil, err
		}
		s.qp, err = s.dev.CreateQP(pd, transport.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: o.window})
		return s, err
	}
	a, err := open(o.addrA)
	if err != nil {
		return benchResult{}, err
	}
	b, err := open(o.addrB)
	if err != nil {
		return benchResult{}, err
	}
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		for _, attr := range []transport.QPAttr{
			{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p[1].qp.QPN(), Remote: p[1].c.LocalAddr(), RQPSN: 1, PathMTU: o.mtu},
			{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		} {
			if err := p[0].qp.Modify(attr); err != nil {
				return benchResult{}, err
			}
		}
	}
	var done atomic.Uint64
	stop := ticker(progress, "transport", done.Load)
	defer stop()
	wcs := make([]transport.WC, 2*o.window)
	poll := func() error {
		n, err := a.cq.PollWait(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess {
				return fmt.Errorf("work request %d: %v", wc.ID, wc.Status)
			}
		}
		done.Add(uint64(n))
		return nil
	}
	// Keep the window full until the deadline. Then the oldest message in
	// flight may finish (the one on the wire), and the run stops: the rest
	// of the window is flushed when the device closes, not waited for, so
	// a window of large messages does not stretch the run by its length.
	start, cpu := time.Now(), startCPU()
	deadline := start.Add(o.duration)
	// The window's free slots are posted in one call, as an application
	// hands ibv_post_send a list: the transport then sends their packets
	// in one batch (one GSO send where they are of one length), as the
	// udp path sends its datagrams 64 to a call.
	posted := uint64(0)
	wrs := make([]transport.SendWR, o.window)
	for time.Now().Before(deadline) {
		free := uint64(o.window) - (posted - done.Load())
		if free == 0 {
			if err := poll(); err != nil {
				return benchResult{}, err
			}
			continue
		}
		batch := wrs[:free]
		for i := range batch {
			off := int((posted+uint64(i))%uint64(slots)) * o.size
			batch[i] = transport.SendWR{ID: posted + uint64(i), Opcode: transport.OpWrite, Signaled: true,
				Local: transport.SGE{MR: a.mr, Offset: off, Length: o.size}, Remote: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
		}
		if err := a.qp.PostSend(batch...); err != nil {
			return benchResult{}, err
		}
		posted += free
	}
	if posted > done.Load() {
		if err := poll(); err != nil {
			return benchResult{}, err
		}
	}
	wall := time.Since(start)
	res := result("transport", done.Load(), wall, o.size)
	res.CPU = cpu.per(res.Messages, wall)
	res.Offload, res.Lends = a.c.Offload().String(), b.c.LendsFrames()
	res.Sender, res.Receiver = perMessage(a.c.Stats().Snapshot(), res.Messages), perMessage(b.c.Stats().Snapshot(), res.Messages)
	return res, nil
}

func benchUDP(ctx context.Context, o benchOptions, progress io.Writer) (benchResult, error) {
	f, err := udpbaseline.Open(udpbaseline.Options{
		From: netip.AddrPortFrom(netip.MustParseAddr(o.addrA), uint16(o.port)),
		To:   netip.AddrPortFrom(netip.MustParseAddr(o.addrB), uint16(o.port)),
		Size: o.size, Datagram: o.mtu, Window: o.window, NoGSO: !o.offload, NoGRO: !o.offload,
	})
	if err != nil {
		return benchResult{}, err
	}
	defer f.Close()
	perMsg := uint64((o.size + o.mtu - 1) / o.mtu)
	stop := ticker(progress, "udp", func() uint64 { return f.Received() / perMsg })
	defer stop()
	// As many messages at a time as one system call's batch holds, so that
	// small messages go out 64 to a sendmmsg as the transport's packets do;
	// at the deadline the messages of the last call may finish.
	chunk := max(1, 64/int(perMsg))
	start, cpu := time.Now(), startCPU()
	for deadline := start.Add(o.duration); time.Now().Before(deadline); {
		if err := f.Send(ctx, chunk); err != nil {
			return benchResult{}, err
		}
	}
	// What is in flight may arrive; what never does is lost, and the wait
	// for it is not counted.
	r, err := f.Drain(ctx)
	if err != nil {
		return benchResult{}, err
	}
	el := r.End.Sub(start)
	if el <= 0 {
		el = time.Since(start)
	}
	res := result("udp", r.Messages, el, o.size)
	res.CPU = cpu.per(r.Messages, time.Since(start))
	res.Lost = r.Lost()
	res.Offload = f.Offload().String()
	m := float64(max(r.Messages, 1))
	res.Sender = benchCost{SendCalls: float64(r.TxCalls) / m, Sends: float64(r.TxBuffers) / m, PacketsOut: float64(r.Sent) / m}
	res.Receiver = benchCost{RecvCalls: float64(r.RxCalls) / m, Reads: float64(r.RxBuffers) / m, PacketsIn: float64(r.Received) / m}
	return res, nil
}

// measured reports a run that moved no whole message: its rate (and the
// ratio) would be zero or NaN, not a measurement.
func (r benchResult) measured(o benchOptions) error {
	if r.Messages > 0 {
		return nil
	}
	return fmt.Errorf("no %d-byte message arrived whole in %.3gs: --duration %v is too short to measure", o.size, r.Seconds, o.duration)
}

func result(path string, n uint64, d time.Duration, size int) benchResult {
	s := d.Seconds()
	return benchResult{Path: path, Messages: n, Seconds: s, MsgsPerS: float64(n) / s, MBPerS: float64(n) * float64(size) / s / 1e6}
}
