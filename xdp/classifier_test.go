package xdp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// XDP actions (include/uapi/linux/bpf.h).
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

var actionNames = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX", 4: "REDIRECT"}

const (
	ownedQP  = 0x000123
	remoteQP = 0x000456
	otherQP  = 0x000999
)

func loadProgram(tb testing.TB, opts xdp.Options) *xdp.Program {
	tb.Helper()
	needRoot(tb)
	if opts.Logger == nil {
		opts.Logger = testLogger(tb)
	}
	p, err := xdp.Load(opts)
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	tb.Cleanup(func() {
		if err := p.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return p
}

// run runs the classifier once on frame and returns the action and the
// frame after the program (grown or shrunk).
func run(tb testing.TB, p *xdp.Program, frame []byte) (uint32, []byte) {
	tb.Helper()
	prog, _ := p.Programs()
	out := bytes.Repeat([]byte{0xff}, 4096)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := prog.Run(&opts)
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return ret, opts.DataOut
}

// testLogger sends the package's logs to the test's log.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, nil))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func counters(tb testing.TB, p *xdp.Program) xdp.Counters {
	tb.Helper()
	c, err := p.Counters()
	if err != nil {
		tb.Fatalf("Counters: %v", err)
	}
	return c
}

func roceFrame(op roce.Opcode, qpn uint32, ecn uint8) frameSpec {
	return frameSpec{src: ip4A, dst: ip4B, sport: 0xc001, ecn: ecn, transport: transport(op, qpn, 64)}
}

// TestClassify covers the pass and drop branches and the counters they
// move: every case runs once on a fresh program.
func TestClassify(t *testing.T) {
	// Frames that need a hand-made edit after building.
	tverFrame := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))
	tverFrame[14+20+8+1] |= 1 // BTH TVer 1
	reserved := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))
	reserved[14+20+8] = 0x40 // RD: rbridge does not speak it
	shortUDP := buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, transport: transport(roce.RCRDMAWriteFirst, ownedQP, 0)})
	shortUDP = shortUDP[:len(shortUDP)-8] // RETH cut, and the ICRC
	badLen := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))
	binary.BigEndian.PutUint16(badLen[14+20+4:], 8+12+4) // UDP length < IP payload
	cutBTH := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))[:14+20+8+6]
	frag := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))
	frag[14+6] |= 0x20 // more fragments

	arp := append(append(append([]byte{}, macB[:]...), macA[:]...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)

	for _, tc := range []struct {
		name   string
		frame  []byte
		action uint32
		want   xdp.Counters
		qp     xdp.QPCounters // of ownedQP
	}{
		{"arp", arp, xdpPass, xdp.Counters{NotRoCE: 1}, xdp.QPCounters{}},
		{"udp other port", buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, dport: 53, transport: []byte("hello")}), xdpPass, xdp.Counters{NotRoCE: 1}, xdp.QPCounters{}},
		{"ipv4 fragment", frag, xdpPass, xdp.Counters{NotRoCE: 1}, xdp.QPCounters{}},
		{"unowned qp", buildFrame(roceFrame(roce.RCSendOnly, otherQP, 0)), xdpPass, xdp.Counters{Unowned: 1}, xdp.QPCounters{}},
		{"owned qp, no socket", buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0)), xdpPass, xdp.Counters{NoSocket: 1}, xdp.QPCounters{Packets: 1, Bytes: 14 + 20 + 8 + 12 + 64 + 4}},
		{"owned qp ipv6 two vlans", buildFrame(frameSpec{vlans: 2, src: ip6A, dst: ip6B, sport: 1, transport: transport(roce.RCAcknowledge, ownedQP, 0)}), xdpPass, xdp.Counters{NoSocket: 1}, xdp.QPCounters{Packets: 1, Bytes: 14 + 8 + 40 + 8 + 12 + 4 + 4}},
		{"owned qp ipv4 options", buildFrame(frameSpec{ipOptions: 8, src: ip4A, dst: ip4B, sport: 1, transport: transport(roce.UDSendOnly, ownedQP, 0)}), xdpPass, xdp.Counters{NoSocket: 1}, xdp.QPCounters{Packets: 1, Bytes: 14 + 28 + 8 + 12 + 8 + 4}},
		{"bth version", tverFrame, xdpDrop, xdp.Counters{DropVersion: 1}, xdp.QPCounters{}},
		{"reserved opcode", reserved, xdpDrop, xdp.Counters{DropOpcode: 1}, xdp.QPCounters{}},
		{"bth cut", cutBTH, xdpDrop, xdp.Counters{DropTruncated: 1}, xdp.QPCounters{}},
		{"reth cut", shortUDP, xdpDrop, xdp.Counters{DropTruncated: 1}, xdp.QPCounters{}},
		{"udp length", badLen, xdpDrop, xdp.Counters{DropTruncated: 1}, xdp.QPCounters{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProgram(t, xdp.Options{})
			if err := p.AddQP(ownedQP, xdp.QP{RemoteQPN: remoteQP}); err != nil {
				t.Fatal(err)
			}
			ret, _ := run(t, p, tc.frame)
			if ret != tc.action {
				t.Errorf("action %s, want %s", actionNames[ret], actionNames[tc.action])
			}
			if diff := cmp.Diff(tc.want, counters(t, p)); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
			qc, err := p.QPCounters(ownedQP)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.qp, qc); diff != "" {
				t.Errorf("qp counters (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpcodeTable checks the classifier's opcode table against roce's: a
// known opcode with exactly its headers passes, one byte less is
// truncated; a reserved one is dropped.
func TestOpcodeTable(t *testing.T) {
	p := loadProgram(t, xdp.Options{})
	for op := range 256 {
		o := roce.Opcode(op)
		tr := make([]byte, roce.BTHLen+o.HeaderLen()+roce.ICRCLen)
		roce.BTH(tr).Encode(&roce.BTHFields{Opcode: o, PKey: roce.DefaultPKey, DestQP: otherQP})
		want := xdp.Counters{Unowned: 1}
		if !o.Valid() {
			want = xdp.Counters{DropOpcode: 1}
		}
		before := counters(t, p)
		run(t, p, buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, transport: tr}))
		if diff := cmp.Diff(want, sub(counters(t, p), before)); diff != "" {
			t.Errorf("opcode %v, %d header bytes: counters (-want +got):\n%s", o, o.HeaderLen(), diff)
		}
		if !o.Valid() {
			continue
		}
		before = counters(t, p)
		run(t, p, buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, transport: tr[:len(tr)-1]}))
		if diff := cmp.Diff(xdp.Counters{DropTruncated: 1}, sub(counters(t, p), before)); diff != "" {
			t.Errorf("opcode %v one byte short: counters (-want +got):\n%s", o, diff)
		}
	}
}

// TestQPFilter checks the filter in front of the QP table: QPs whose
// numbers share their low 16 bits share a filter bit, which stays set until
// the last of them is removed, and a QP sharing the bit of an owned one but
// not added itself is still not owned.
func TestQPFilter(t *testing.T) {
	p := loadProgram(t, xdp.Options{})
	const a, b, c = 0x010203, 0x020203, 0x030203 // same low 16 bits
	owned := xdp.Counters{NoSocket: 1}
	notOwned := xdp.Counters{Unowned: 1}
	expect := func(step string, want map[uint32]xdp.Counters) {
		t.Helper()
		for qpn, w := range want {
			before := counters(t, p)
			run(t, p, buildFrame(roceFrame(roce.RCSendOnly, qpn, 0)))
			if diff := cmp.Diff(w, sub(counters(t, p), before)); diff != "" {
				t.Errorf("%s: QP %#x: counters (-want +got):\n%s", step, qpn, diff)
			}
		}
	}
	expect("none added", map[uint32]xdp.Counters{a: notOwned, b: notOwned, c: notOwned})
	for _, qpn := range []uint32{a, b} {
		if err := p.AddQP(qpn, xdp.QP{RemoteQPN: remoteQP}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.AddQP(a, xdp.QP{RemoteQPN: remoteQP + 1}); err != nil { // again: an update
		t.Fatal(err)
	}
	expect("a and b added", map[uint32]xdp.Counters{a: owned, b: owned, c: notOwned})
	if err := p.RemoveQP(a); err != nil {
		t.Fatal(err)
	}
	expect("a removed", map[uint32]xdp.Counters{a: notOwned, b: owned, c: notOwned})
	if err := p.RemoveQP(b); err != nil {
		t.Fatal(err)
	}
	expect("both removed", map[uint32]xdp.Counters{a: notOwned, b: notOwned})
	if err := p.RemoveQP(b); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("removing b twice: %v, want ErrKeyNotExist", err)
	}
	if err := p.AddQP(b, xdp.QP{RemoteQPN: remoteQP}); err != nil {
		t.Fatal(err)
	}
	expect("b added again", map[uint32]xdp.Counters{b: owned, a: notOwned})
}

func sub(a, b xdp.Counters) xdp.Counters {
	return xdp.Counters{
		NotRoCE: a.NotRoCE - b.NotRoCE, Unowned: a.Unowned - b.Unowned, NoSocket: a.NoSocket - b.NoSocket,
		Redirected: a.Redirected - b.Redirected, DropTruncated: a.DropTruncated - b.DropTruncated,
		DropVersion: a.DropVersion - b.DropVersion, DropOpcode: a.DropOpcode - b.DropOpcode,
		DropFault: a.DropFault - b.DropFault, CNPSent: a.CNPSent - b.CNPSent,
		CNPLimited: a.CNPLimited - b.CNPLimited, CNPFailed: a.CNPFailed - b.CNPFailed,
		Unjoined: a.Unjoined - b.Unjoined,
	}
}

// TestCNP checks the CNP the classifier builds from an ECN-CE packet: sent
// back with XDP_TX, addresses swapped, to the remote QP, ICRC right.
func TestCNP(t *testing.T) {
	p := loadProgram(t, xdp.Options{CNP: true, CNPInterval: time.Nanosecond})
	if err := p.AddQP(ownedQP, xdp.QP{RemoteQPN: remoteQP}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		spec   frameSpec
		destQP uint32
	}{
		{"ipv4 write", frameSpec{src: ip4A, dst: ip4B, sport: 0xc123, transport: transport(roce.RCRDMAWriteOnly, ownedQP, 1024)}, remoteQP},
		{"ipv4 ack grows", frameSpec{src: ip4A, dst: ip4B, sport: 0xc123, transport: transport(roce.RCAcknowledge, ownedQP, 0)}, remoteQP},
		{"ipv4 options vlan", frameSpec{vlans: 1, ipOptions: 12, src: ip4A, dst: ip4B, sport: 0xc124, transport: transport(roce.RCSendOnly, ownedQP, 3)}, remoteQP},
		{"ipv6 two vlans", frameSpec{vlans: 2, src: ip6A, dst: ip6B, sport: 0xc125, transport: transport(roce.RCSendFirst, ownedQP, 256)}, remoteQP},
		{"ipv6 ud", frameSpec{src: ip6A, dst: ip6B, sport: 0xc126, transport: transport(roce.UDSendOnly, ownedQP, 8)}, 0x777},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.ecn = roce.ECNCE
			before := counters(t, p)
			beforeQP, err := p.QPCounters(ownedQP)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Microsecond)
			in := buildFrame(tc.spec)
			ret, out := run(t, p, in)
			if ret != xdpTX {
				t.Fatalf("action %s, want TX", actionNames[ret])
			}
			if diff := cmp.Diff(xdp.Counters{CNPSent: 1}, sub(counters(t, p), before)); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
			qc, err := p.QPCounters(ownedQP)
			if err != nil {
				t.Fatal(err)
			}
			if got := (xdp.QPCounters{Packets: qc.Packets - beforeQP.Packets, Bytes: qc.Bytes - beforeQP.Bytes, ECNCE: qc.ECNCE - beforeQP.ECNCE, CNPs: qc.CNPs - beforeQP.CNPs}); got != (xdp.QPCounters{Packets: 1, Bytes: uint64(len(in)), ECNCE: 1, CNPs: 1}) {
				t.Errorf("qp counters moved by %+v", got)
			}
			checkCNP(t, in, out, tc.destQP)
		})
	}
}

// checkCNP checks that out is the CNP answering in.
func checkCNP(t *testing.T, in, out []byte, destQP uint32) {
	t.Helper()
	var fin, fout roce.Frame
	if err := fin.DecodeEthernet(in); err != nil {
		t.Fatalf("decode input: %v", err)
	}
	if err := fout.DecodeEthernet(out); err != nil {
		t.Fatalf("decode CNP: %v", err)
	}
	if err := fout.VerifyICRC(); err != nil {
		t.Errorf("CNP ICRC: %v", err)
	}
	ipLen := 20
	if fout.IPv6 {
		ipLen = 40
	}
	if want := fout.EthLen + ipLen + 8 + roce.CNPLen; len(out) != want {
		t.Errorf("CNP frame %d bytes, want %d", len(out), want)
	}
	if !bytes.Equal(out[0:6], in[6:12]) || !bytes.Equal(out[6:12], in[0:6]) {
		t.Errorf("MACs not swapped: in % x, out % x", in[:12], out[:12])
	}
	if !bytes.Equal(out[12:fout.EthLen], in[12:fin.EthLen]) {
		t.Errorf("VLAN tags changed: % x, want % x", out[12:fout.EthLen], in[12:fin.EthLen])
	}
	wantSrc := netip.AddrPortFrom(fin.Dst.Addr(), fin.Src.Port())
	wantDst := netip.AddrPortFrom(fin.Src.Addr(), roce.Port)
	if fout.Src != wantSrc || fout.Dst != wantDst {
		t.Errorf("CNP %v -> %v, want %v -> %v", fout.Src, fout.Dst, wantSrc, wantDst)
	}
	if fout.ECN != 0 {
		t.Errorf("CNP ECN %d, want 0", fout.ECN)
	}
	if !fout.IPv6 {
		if c := ipChecksum(fout.IP[:20]); c != 0 {
			t.Errorf("CNP IPv4 header checksum does not verify (sum %#x)", c)
		}
	}
	bth := fout.Packet.BTH
	got := bth.Fields()
	want := roce.BTHFields{Opcode: roce.CNP, PKey: roce.DefaultPKey, BECN: true, DestQP: destQP}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CNP BTH (-want +got):\n%s", diff)
	}
	if !bytes.Equal(fout.Packet.CNPReserved, make([]byte, roce.CNPReservedLen)) {
		t.Errorf("CNP reserved bytes % x", fout.Packet.CNPReserved)
	}
}

// TestCNPRateLimit checks that one QP gets at most one CNP per interval,
// that the marked packets in between go on, and that without Options.CNP
// (the default) marked packets go on unanswered.
func TestCNPRateLimit(t *testing.T) {
	const interval = 20 * time.Millisecond
	p := loadProgram(t, xdp.Options{CNP: true, CNPInterval: interval})
	for _, qp := range []uint32{ownedQP, otherQP} {
		if err := p.AddQP(qp, xdp.QP{RemoteQPN: remoteQP}); err != nil {
			t.Fatal(err)
		}
	}
	ce := buildFrame(roceFrame(roce.RCSendOnly, ownedQP, roce.ECNCE))
	start := time.Now()
	if ret, _ := run(t, p, ce); ret != xdpTX {
		t.Fatalf("first CE: action %s, want TX", actionNames[ret])
	}
	ret, _ := run(t, p, ce)
	other, _ := run(t, p, buildFrame(roceFrame(roce.RCSendOnly, otherQP, roce.ECNCE)))
	if time.Since(start) < interval {
		if ret != xdpPass {
			t.Errorf("second CE within the interval: action %s, want PASS (no socket)", actionNames[ret])
		}
		if other != xdpTX {
			t.Errorf("CE on another QP: action %s, want TX", actionNames[other])
		}
		if diff := cmp.Diff(xdp.Counters{CNPSent: 2, CNPLimited: 1, NoSocket: 1}, counters(t, p)); diff != "" {
			t.Errorf("counters (-want +got):\n%s", diff)
		}
	} else {
		t.Logf("machine too slow to check the interval (%v > %v)", time.Since(start), interval)
	}
	time.Sleep(interval + time.Millisecond)
	if ret, _ := run(t, p, ce); ret != xdpTX {
		t.Errorf("CE after the interval: action %s, want TX", actionNames[ret])
	}

	off := loadProgram(t, xdp.Options{})
	if err := off.AddQP(ownedQP, xdp.QP{RemoteQPN: remoteQP}); err != nil {
		t.Fatal(err)
	}
	if ret, _ := run(t, off, ce); ret != xdpPass {
		t.Errorf("CNP off: action %s, want PASS", actionNames[ret])
	}
	qc, err := off.QPCounters(ownedQP)
	if err != nil {
		t.Fatal(err)
	}
	if qc.ECNCE != 1 || qc.CNPs != 0 {
		t.Errorf("CNP off: qp counters %+v, want one ECN-CE and no CNP", qc)
	}
}

// TestFault checks the fault injection: every Nth, a fraction, and off.
func TestFault(t *testing.T) {
	p := loadProgram(t, xdp.Options{})
	frame := buildFrame(roceFrame(roce.RCSendOnly, otherQP, 0))
	drops := func(n int) (dropped []int) {
		for i := 1; i <= n; i++ {
			if ret, _ := run(t, p, frame); ret == xdpDrop {
				dropped = append(dropped, i)
			}
		}
		return dropped
	}
	if got := drops(10); len(got) != 0 {
		t.Errorf("fault off by default: dropped %v", got)
	}
	if err := p.SetFault(xdp.Fault{EveryNth: 3}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{3, 6, 9}, drops(10)); diff != "" {
		t.Errorf("every 3rd: dropped (-want +got):\n%s", diff)
	}
	if err := p.SetFault(xdp.Fault{Fraction: 1}); err != nil {
		t.Fatal(err)
	}
	if got := drops(20); len(got) != 20 {
		t.Errorf("fraction 1: dropped %d of 20", len(got))
	}
	if err := p.SetFault(xdp.Fault{Fraction: 0.5}); err != nil {
		t.Fatal(err)
	}
	// Binomial(1000, 0.5): 5 standard deviations either side.
	half := len(drops(1000))
	if half < 420 || half > 580 {
		t.Errorf("fraction 0.5: dropped %d of 1000", half)
	}
	// Non-RoCE traffic is never a fault's victim.
	if ret, _ := run(t, p, buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, dport: 53, transport: []byte("x")})); ret != xdpPass {
		t.Errorf("fault on: UDP to port 53: action %s, want PASS", actionNames[ret])
	}
	if err := p.SetFault(xdp.Fault{}); err != nil {
		t.Fatal(err)
	}
	if got := drops(10); len(got) != 0 {
		t.Errorf("fault off again: dropped %v", got)
	}
	want := xdp.Counters{DropFault: uint64(3 + 20 + half), Unowned: uint64(10+10+20+1000+10) - uint64(3+20+half), NotRoCE: 1}
	if diff := cmp.Diff(want, counters(t, p)); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if err := p.SetFault(xdp.Fault{Fraction: 1.5}); err == nil {
		t.Error("SetFault(Fraction 1.5): no error")
	}
}
