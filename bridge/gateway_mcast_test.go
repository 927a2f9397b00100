package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// The groups' host tests put both legs and the applications on loopback:
// one wire that every member hears, so the gateway hears its own sends on
// the other leg (a loop) and must not relay them again.

// mcastGroup is this process's group address (test processes running at
// once do not share it).
var mcastGroup = netip.MustParseAddr(fmt.Sprintf("239.201.%d.%d", os.Getpid()>>8%256, os.Getpid()%256))

func groupConfig(t *testing.T, direction string) *config.Config {
	t.Helper()
	return groupConfigWith(t, direction, "")
}

// groupConfigWith is groupConfig with more of the group's keys, as
// ", key: value".
func groupConfigWith(t *testing.T, direction, keys string) *config.Config {
	t.Helper()
	y := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
groups:
  - {name: ticks, group: GROUP, roce: a, ib: b, direction: DIRKEYS}
`
	y = strings.NewReplacer("127.0.10.", loNet, "GROUP", mcastGroup.String(), "DIR", direction, "KEYS", keys).Replace(y)
	c, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// joinQP attaches a UD QP of the app to the group (on lo).
func (a *cmApp) joinQP(t *testing.T, n int) (*transport.QP, *transport.CQ) {
	t.Helper()
	return a.joinGroup(t, mcastGroup, "lo", n)
}

// joinGroup attaches a UD QP of the app to group on interface ifname in
// the app's network namespace.
func (a *cmApp) joinGroup(t *testing.T, group netip.Addr, ifname string, n int) (*transport.QP, *transport.CQ) {
	t.Helper()
	qp, rcq := a.udQP(t, n)
	if err := a.dev.AttachMulticast(qp, group, func() (roce.PacketConn, error) {
		var c *udpconn.Conn
		err := netns.Do(a.ns, func() error {
			ifi, err := net.InterfaceByName(ifname)
			if err == nil {
				c, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index})
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return c, nil
	}); err != nil {
		t.Fatal(err)
	}
	return qp, rcq
}

// drain counts what reached cq, by source address, until nothing came for
// a while; each payload must be want's.
func drain(t *testing.T, a *cmApp, cq *transport.CQ, qp *transport.QP, want []byte) map[netip.Addr]int {
	t.Helper()
	got := map[netip.Addr]int{}
	var wcs [16]transport.WC
	for idle := 0; idle < 20; {
		n := cq.Poll(wcs[:])
		if n == 0 {
			idle++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		idle = 0
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess || !bytes.Equal(a.mem[4096*int(wc.ID):][:wc.ByteLen], want) {
				t.Errorf("datagram %+v: want %q", wc, want)
			}
			got[wc.Src.Addr()]++
			if err := qp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: a.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}

// TestGatewayGroup: what a member sends to the group on leg a crosses to
// the group on leg b; the gateway's own sends, heard back, are dropped and
// counted (both legs on one wire: a loop), so nothing storms. Relayed both
// ways, the member's datagram reaches the gateway on both legs at once
// (the one wire): it crosses once, from whichever leg took it first, and
// its arrival on the other leg is the same bytes on the other side, dropped
// as a loop. With loop_window 0 it crosses both ways, and only the own
// rule holds the loop.
func TestGatewayGroup(t *testing.T) {
	for _, tc := range []struct {
		name, direction, keys string
		// DropOwn per datagram: the gateway's sends heard by its QP on
		// each leg that receives.
		own [2]uint64
		// Whether the datagram crosses both ways (else one way, the loop
		// filter dropping its arrival on the other leg).
		bothWays bool
	}{
		{config.DirectionRoCEToIB, config.DirectionRoCEToIB, "", [2]uint64{1, 0}, false},
		{config.DirectionBoth, config.DirectionBoth, "", [2]uint64{1, 1}, false},
		{"both, loop_window 0", config.DirectionBoth, ", loop_window: 0s", [2]uint64{2, 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sender, receiver := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			g := startGatewayWith(t, groupConfigWith(t, tc.direction, tc.keys), bridge.GatewayOptions{})
			rqp, rcq := receiver.joinQP(t, 32)
			sqp, _ := sender.udQP(t, 1)
			const n = 5
			payload := []byte("tick 42") // the same bytes each time: the same member's, they cross
			for range n {
				sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
			}
			got := drain(t, receiver, rcq, rqp, payload)
			gwA, gwB := netip.MustParseAddr(lo("1")), netip.MustParseAddr(lo("2"))
			// The sender's own copies, and the gateway's: from leg b
			// (relayed roce to ib) or from leg a (ib to roce).
			fromB, fromA := got[gwB], got[gwA]
			if tc.direction == config.DirectionRoCEToIB && fromA != 0 {
				t.Errorf("%d datagrams from leg a, relayed ib to roce: the group relays roce to ib only", fromA)
			}
			wantFrom := n
			if tc.bothWays {
				wantFrom = 2 * n
				if fromA != n || fromB != n {
					t.Errorf("%d datagrams from leg a and %d from leg b, want %d each: loop_window 0 relays both ways", fromA, fromB, n)
				}
			}
			if got[sender.ip] != n || fromA+fromB != wantFrom || len(got) > 3 {
				t.Errorf("the receiver got, by source, %v; want %d from the sender %v and %d from the gateway (%v or %v)", got, n, sender.ip, wantFrom, gwA, gwB)
			}
			st := g.GroupStats("ticks")
			if st == nil {
				t.Fatal("no stats for group ticks")
			}
			w := bridge.UDStatsSnapshot{Datagrams: [2]uint64{uint64(fromB), uint64(fromA)},
				DropOwn: [2]uint64{tc.own[0] * n, tc.own[1] * n}}
			if tc.direction == config.DirectionBoth && !tc.bothWays {
				// What crossed one way arrived on the other leg too.
				w.DropLoop = [2]uint64{uint64(fromA), uint64(fromB)}
			}
			for d := range 2 {
				w.Bytes[d] = w.Datagrams[d] * uint64(len(payload))
			}
			if d := cmp.Diff(w, *st); d != "" {
				t.Errorf("group stats (-want +got):\n%s", d)
			}
			m, _ := scrape(t, startAdmin(t, g))
			for name, v := range map[string]float64{
				`rbridge_group_datagrams_total{direction="roce_to_ib",group="ticks"}`:            float64(w.Datagrams[0]),
				`rbridge_group_dropped_total{cause="own",direction="roce_to_ib",group="ticks"}`:  float64(w.DropOwn[0]),
				`rbridge_group_dropped_total{cause="loop",direction="ib_to_roce",group="ticks"}`: float64(w.DropLoop[1]),
			} {
				if got, ok := m[name]; !ok || got != v {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
				}
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(bridge.NewCollector(g)); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("pedantic gather: %v", err)
			}
			if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Direction != tc.direction || s.Groups[0].Group != mcastGroup.String() {
				t.Errorf("status groups %+v", s.Groups)
			}
		})
	}
}

// sendUDTo sends payload from offset 512 KiB of the app's memory with
// rdma_cm's Q_Key.
func (a *cmApp) sendUDTo(t *testing.T, qp *transport.QP, to netip.Addr, qpn uint32, payload []byte) {
	t.Helper()
	const off = 512 << 10
	copy(a.mem[off:], payload)
	if err := qp.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: transport.SGE{MR: a.mr, Offset: off, Length: len(payload)},
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(to, roce.Port), QPN: qpn, QKey: cm.RDMAUDPQKey}}); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayGroupReload: groups are joined once, as legs are opened: a
// reload whose groups differ (busy_poll too) is refused, one with the
// same groups applies, and one that changes only a group's rate limit
// puts it in force.
func TestGatewayGroupReload(t *testing.T) {
	g := startGatewayWith(t, groupConfig(t, config.DirectionBoth), bridge.GatewayOptions{})
	if _, err := g.Reload(groupConfig(t, config.DirectionRoCEToIB)); !errors.Is(err, bridge.ErrLegsChanged) {
		t.Errorf("reload with a group's direction changed: %v, want ErrLegsChanged", err)
	}
	for _, keys := range []string{", loop_window: 1s", ", peers: [198.18.1.9]", ", busy_poll: true"} {
		if _, err := g.Reload(groupConfigWith(t, config.DirectionBoth, keys)); !errors.Is(err, bridge.ErrLegsChanged) {
			t.Errorf("reload with the group's %q: %v, want ErrLegsChanged", keys, err)
		}
	}
	if res, err := g.Reload(groupConfig(t, config.DirectionBoth)); err != nil || res.RateChanged != nil {
		t.Errorf("reload with the same groups: %v, rate changed of %v", err, res.RateChanged)
	}
	if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Direction != config.DirectionBoth || s.Groups[0].Rate != nil {
		t.Errorf("groups after the reloads: %+v", s.Groups)
	}
	for _, tc := range []struct {
		keys    string
		changed []string
		want    *config.Rate
	}{
		{", rate: {packets: 100}", []string{"ticks"}, &config.Rate{Packets: 100, BurstPackets: 10}},
		{", rate: {packets: 100}", nil, &config.Rate{Packets: 100, BurstPackets: 10}},
		{", rate: {packets: 100, bytes: 1MB}", []string{"ticks"}, &config.Rate{Packets: 100, BurstPackets: 10, Bytes: 1e6, BurstBytes: 1e5}},
		{"", []string{"ticks"}, nil},
	} {
		res, err := g.Reload(groupConfigWith(t, config.DirectionBoth, tc.keys))
		if err != nil || !cmp.Equal(res.RateChanged, tc.changed) {
			t.Errorf("reload with %q: %v, rate changed of %v; want no error, %v", tc.keys, err, res.RateChanged, tc.changed)
		}
		if s := g.Status(); len(s.Groups) != 1 || !cmp.Equal(s.Groups[0].Rate, tc.want) {
			t.Errorf("after the reload with %q the group's rate is %+v, want %+v", tc.keys, s.Groups[0].Rate, tc.want)
		}
	}
}

// TestGatewayGroupRate: datagrams sent far faster than a group's rate
// limit cross no more than its burst and its rate over the time they
// took; the others are dropped and counted under cause "rate". Without a
// limit every one crosses.
func TestGatewayGroupRate(t *testing.T) {
	const (
		n     = 50               // datagrams sent
		every = time.Millisecond // apart: 1000 a second
		limit = 10               // a second
		burst = 2                // at once
		keys  = ", rate: {packets: 10, burst_packets: 2}"
	)
	for _, tc := range []struct {
		name, keys string
	}{{"limited", keys}, {"unlimited", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			sender, receiver := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			g := startGatewayWith(t, groupConfigWith(t, config.DirectionRoCEToIB, tc.keys), bridge.GatewayOptions{})
			// The receiver hears the sender too (one wire): room for both.
			rqp, rcq := receiver.joinQP(t, 2*n+8)
			sqp, _ := sender.udQP(t, 1)
			payload := []byte("tick 42")
			start := time.Now()
			for range n {
				sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
				time.Sleep(every)
			}
			// The gateway has dealt with every one (relayed or dropped)
			// by now: the tokens it had cannot exceed the burst and what
			// accrued since start.
			var st *bridge.UDStatsSnapshot
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				st = g.GroupStats("ticks")
				if st.Datagrams[0]+st.DropRate[0]+st.DropNoReceive[0]+st.DropPoolEmpty[0]+st.DropSendFailed[0] >= n || time.Now().After(deadline) {
					break
				}
			}
			elapsed := time.Since(start)
			got := drain(t, receiver, rcq, rqp, payload)
			gwB := netip.MustParseAddr(lo("2"))
			crossed := got[gwB]
			if got[sender.ip] != n {
				t.Errorf("the receiver heard %d of the sender's %d datagrams itself: the wire lost some, the test proves nothing", got[sender.ip], n)
			}
			if uint64(crossed) != st.Datagrams[0] {
				t.Errorf("%d datagrams reached the receiver through the gateway, which counted %d relayed", crossed, st.Datagrams[0])
			}
			dropped := st.DropRate[0] + st.DropNoReceive[0] + st.DropPoolEmpty[0] + st.DropSendFailed[0] + st.DropTooLong[0]
			if dropped != uint64(n-crossed) {
				t.Errorf("%d of %d crossed and %d were counted dropped (%+v): want %d", crossed, n, dropped, *st, n-crossed)
			}
			if tc.keys == "" {
				if crossed != n {
					t.Errorf("without a limit %d of %d crossed (stats %+v)", crossed, n, *st)
				}
				return
			}
			t.Logf("%d of %d crossed in %v", crossed, n, elapsed.Round(time.Millisecond))
			checkRate(t, g, crossed, burst, limit, elapsed, st.DropRate[0], `rbridge_group_dropped_total{cause="rate",direction="roce_to_ib",group="ticks"}`)
			if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Rate == nil || s.Groups[0].Rate.Packets != limit {
				t.Errorf("status groups %+v: want the rate limit shown", s.Groups)
			}
		})
	}
}

// TestGatewayGroupBusyPoll: a group with busy_poll has its receive loop
// spin (the process burns CPU with nothing to relay) and relays as
// before; with busy_poll_cpus the loop's thread is pinned to the CPU
// given, and that thread ends with the gateway. With busy_poll_idle the
// loop naps with nothing to relay (little CPU, a quiet spell counted),
// relays all the same, and naps again after.
func TestGatewayGroupBusyPoll(t *testing.T) {
	allowed := cpusAllowed(t, "self")
	last := allowed[len(allowed)-1]
	for _, tc := range []struct {
		name, groupKeys, describe string
		naps                      bool
	}{
		{"unpinned", ", busy_poll: true", "busy-polled", false},
		{"pinned", fmt.Sprintf(", busy_poll: true, busy_poll_cpus: [%s]", last), "busy-polled on CPU " + last, false},
		{"napping", ", busy_poll: true, busy_poll_idle: 1ms", "busy-polled, napping after 1ms idle", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sender, receiver := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			before, beforeRunning := pinnedThreads(t, last, true), pinnedThreads(t, last, false)
			g := startGatewayWith(t, groupConfigWith(t, config.DirectionRoCEToIB, tc.groupKeys), bridge.GatewayOptions{})
			if s := g.Status(); len(s.Groups) != 1 || !strings.Contains(s.Groups[0].RoCESide, tc.describe) {
				t.Errorf("status groups %+v: want the RoCE side %q", s.Groups, tc.describe)
			}
			naps := func() uint64 {
				t.Helper()
				s := g.Status()
				if n := s.Groups[0].BusyPollNaps; (n != nil) != tc.naps {
					t.Fatalf("status busy_poll_naps %v: want it shown only with busy_poll_idle", n)
				} else if n != nil {
					if n[1] != 0 {
						t.Errorf("ib_to_roce, not relayed, napped %d times", n[1])
					}
					return n[0]
				}
				return 0
			}
			if tc.naps {
				// A napping loop with nothing to relay takes a few percent
				// of a CPU (a poll per ms at most), where a spinning one
				// takes all of one, or its share of a loaded host's.
				time.Sleep(100 * time.Millisecond)
				cpu := cpuTime(t)
				time.Sleep(time.Second)
				if used := cpuTime(t) - cpu; used > 300*time.Millisecond {
					t.Errorf("the gateway used %v of CPU in 1 s with nothing to relay: the loop does not nap", used)
				} else {
					t.Logf("the gateway used %v of CPU in 1 s with nothing to relay, its loop napping", used)
				}
				if n := naps(); n != 1 {
					t.Errorf("one quiet spell before any datagram: %d naps", n)
				}
			} else {
				// Nothing to relay: a loop that sleeps takes no CPU (about 4 ms
				// in 500), a spinning one a CPU, or its share of a loaded host's:
				// 100 ms of it within 5 s.
				cpu, start := cpuTime(t), time.Now()
				for used := time.Duration(0); used < 100*time.Millisecond; used = cpuTime(t) - cpu {
					if time.Since(start) > 5*time.Second {
						t.Errorf("the gateway used %v of CPU in 5 s with nothing to relay: the loop does not spin", used)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				naps()
			}
			if tc.name == "pinned" {
				if got := pinnedThreads(t, last, true); len(got) != len(before)+1 {
					t.Errorf("threads pinned to CPU %s: %v before the gateway, %v with it: want one more", last, before, got)
				}
			}
			rqp, rcq := receiver.joinQP(t, 32)
			sqp, _ := sender.udQP(t, 1)
			const n = 5
			payload := []byte("spun tick")
			for range n {
				sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
			}
			got := drain(t, receiver, rcq, rqp, payload)
			if gwB := netip.MustParseAddr(lo("2")); got[gwB] != n {
				t.Errorf("the receiver got %v by source: want %d from the gateway's leg b", got, n)
			}
			if tc.naps {
				// Woken by the datagrams, it naps again once they are past.
				waitUntil(t, "the loop napping again after the datagrams", func() bool { return naps() >= 2 })
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Close(ctx); err != nil {
				t.Fatalf("close a busy-polling gateway: %v", err)
			}
			if tc.name == "pinned" {
				// The runtime ends a locked goroutine's thread after it
				// returned: give it a moment.
				got := pinnedThreads(t, last, false)
				for deadline := time.Now().Add(2 * time.Second); len(got) != len(beforeRunning) && time.Now().Before(deadline); got = pinnedThreads(t, last, false) {
					time.Sleep(10 * time.Millisecond)
				}
				if len(got) != len(beforeRunning) {
					t.Errorf("threads pinned to CPU %s after the gateway closed: %v, want %v (the loop's thread ends with it)", last, got, beforeRunning)
				}
			}
		})
	}
}

// cpusAllowed is the Cpus_allowed_list of a task in /proc/self, expanded.
func cpusAllowed(t *testing.T, task string) []string {
	t.Helper()
	path := "/proc/self/status"
	if task != "self" {
		path = "/proc/self/task/" + task + "/status"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			var out []string
			for _, r := range strings.Split(strings.TrimSpace(v), ",") {
				var lo, hi int
				if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil {
					fmt.Sscanf(r, "%d", &lo)
					hi = lo
				}
				for c := lo; c <= hi; c++ {
					out = append(out, fmt.Sprint(c))
				}
			}
			return out
		}
	}
	t.Fatalf("%s has no Cpus_allowed_list", path)
	return nil
}

// pinnedThreads is the process's threads allowed on cpu alone; without
// main, but for the main thread: Go cannot end it, so a locked goroutine
// that ends on it leaves it parked for good (runtime.mexit), never running
// Go code again.
func pinnedThreads(t *testing.T, cpu string, main bool) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		if !main && task.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		if b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status"); err == nil && strings.Contains(string(b), "\nCpus_allowed_list:\t"+cpu+"\n") {
			out = append(out, task.Name())
		}
	}
	return out
}

// cpuTime is the CPU the process has used, user and system.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestGatewayGroupPoolEmpty: a group's datagram that finds the gateway's
// pool empty is dropped and counted as pool empty, and nothing else; once
// buffers are back the group relays again.
func TestGatewayGroupPoolEmpty(t *testing.T) {
	sender, receiver := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	const bufs = 72 // the group's two QPs' receive queues take 64
	g := startGatewayWith(t, groupConfig(t, config.DirectionRoCEToIB), bridge.GatewayOptions{Pool: pool.Options{Size: bufs * 4096, Classes: []int{4096}}})
	if free := g.Pool().Stats()[0].Free; free != bufs-64 {
		t.Fatalf("%d buffers free with the group joined, want %d", free, bufs-64)
	}
	var held []*pool.Buf
	for {
		b, err := g.Pool().Get(4096)
		if err != nil {
			break
		}
		held = append(held, b)
	}
	rqp, rcq := receiver.joinQP(t, 32)
	sqp, _ := sender.udQP(t, 1)
	const n = 5
	payload := []byte("tick 7")
	for range n {
		sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
	}
	got := drain(t, receiver, rcq, rqp, payload)
	gwB := netip.MustParseAddr(lo("2"))
	if got[gwB] != 0 {
		t.Errorf("%d datagrams relayed with the pool empty", got[gwB])
	}
	for _, b := range held {
		b.Release()
	}
	sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
	if got := drain(t, receiver, rcq, rqp, payload); got[gwB] != 1 {
		t.Errorf("the receiver got, by source, %v once buffers were back; want 1 from the gateway's %v", got, gwB)
	}
	// The relayed one was heard back on leg a: own. A datagram is counted
	// once its send completed, and its buffer is back then, which may be
	// after the receiver got it.
	want := bridge.UDStatsSnapshot{Datagrams: [2]uint64{1, 0}, Bytes: [2]uint64{uint64(len(payload)), 0},
		DropPoolEmpty: [2]uint64{n, 0}, DropOwn: [2]uint64{1, 0}}
	var d string
	var free int
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		d, free = cmp.Diff(want, *g.GroupStats("ticks")), g.Pool().Stats()[0].Free
		if d == "" && free == bufs-64 || time.Now().After(deadline) {
			break
		}
	}
	if d != "" {
		t.Errorf("group stats (-want +got):\n%s", d)
	}
	if free != bufs-64 {
		t.Errorf("%d buffers free after, want %d: each drop reposts its buffer", free, bufs-64)
	}
}

// checkRate checks what a rate limit of limit datagrams a second with a
// burst of burst let cross in elapsed: at most the burst and what refilled
// meanwhile (and one for the edges), at least the burst a full bucket lets
// through at once; the drops counted (dropped), and the same on g's
// /metrics as metric.
func checkRate(t *testing.T, g *bridge.Gateway, crossed, burst, limit int, elapsed time.Duration, dropped uint64, metric string) {
	t.Helper()
	bound := float64(burst) + float64(limit)*elapsed.Seconds() + 1
	t.Logf("under %d a second, burst %d: at most %.1f may cross in %v", limit, burst, bound, elapsed.Round(time.Millisecond))
	if float64(crossed) > bound {
		t.Errorf("%d datagrams crossed in %v: more than the burst %d and %d a second allow (%.1f)", crossed, elapsed, burst, limit, bound)
	}
	if crossed < burst {
		t.Errorf("%d datagrams crossed: fewer than the burst (%d) the full bucket lets through at once", crossed, burst)
	}
	if dropped == 0 {
		t.Error("no datagram counted dropped for the rate")
	}
	m, _ := scrape(t, startAdmin(t, g))
	if v, ok := m[metric]; !ok || v != float64(dropped) {
		t.Errorf("%s = %v (present %v), want %d", metric, v, ok, dropped)
	}
}
