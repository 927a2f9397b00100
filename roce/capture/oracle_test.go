package capture_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

// Wireshark's dissectors (tshark) are the oracle for what Decode reports
// about the link and IP layers: the tests compare them on a pcapng of
// crafted frames over three interfaces (Ethernet, Linux cooked v2 with
// nanosecond timestamps, Linux cooked v1). tshark's output is kept in
// testdata/ so that TestTsharkGolden runs without it; TestTsharkOracle runs
// it live (make deps installs it; RBRIDGE_REQUIRE_ORACLES=1, set by make
// test, turns its absence into a failure). -update rewrites both files.

const (
	oraclePcapng   = "testdata/oracle.pcapng"
	oracleTshark   = "testdata/oracle.tshark"
	linuxAnyTshark = "testdata/linux-any.tshark"
)

// tsharkFields are the dissector fields compared with Decode's records.
var tsharkFields = []string{
	"frame.time_epoch", "frame.len", "frame.cap_len",
	"sll.ifindex", "sll.pkttype", "sll.hatype",
	"ieee8021ad.id", "ieee8021ad.priority", "ieee8021ad.dei", "vlan.id", "vlan.priority", "vlan.dei",
	"ip.src", "ip.dst", "ip.dsfield.dscp", "ip.dsfield.ecn", "ip.ttl", "ip.flags.df", "ip.flags.mf", "ip.frag_offset", "ip.id",
	"ipv6.src", "ipv6.dst", "ipv6.tclass.dscp", "ipv6.tclass.ecn", "ipv6.hlim", "ipv6.flow",
	"ipv6.fraghdr.offset", "ipv6.fraghdr.more", "ipv6.fraghdr.ident",
	"udp.srcport", "udp.dstport",
	"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
}

// oracleFrame is one packet of the oracle capture.
type oracleFrame struct {
	iface int // 0 Ethernet, 1 Linux cooked v2, 2 Linux cooked v1
	b     []byte
	wire  int // 0: len(b)
}

var oracleLinkTypes = []uint16{1, 276, 113}

func oracleFrames() []oracleFrame {
	send := transport(roce.RCSendOnly)
	ud := transport(roce.UDSendOnly)
	firstFrag := ipv4(0, 0x2000, nil, roce.Port, send)
	firstFrag = firstFrag[:20+8+12]
	firstFrag[2], firstFrag[3] = 0, byte(len(firstFrag))
	plain := eth(ipv4(0x02, 0x4000, nil, roce.Port, send))
	sll2 := func(pkttype byte, ip []byte) []byte {
		et := byte(0x00)
		if ip[0]>>4 == 6 {
			et = 0xdd
		}
		h := []byte{0x08, et, 0, 0, 0, 0, 0, 3, 0, 1, pkttype, 6, 2, 0, 0, 0, 0, 1, 0, 0}
		if et == 0xdd {
			h[0] = 0x86
		}
		return append(h, ip...)
	}
	return []oracleFrame{
		{b: plain},
		{b: eth(ipv4(0x02, 0x4000, nil, roce.Port, send), 0x8100, 3<<13|42)},
		{b: eth(ipv4(0x02, 0x4000, nil, roce.Port, send), 0x88a8, 0x1000|100, 0x8100, 5<<13)},
		{b: eth(ipv4(26<<2|3, 0x4000, nil, roce.Port, send))},
		{b: eth(ipv4(0x02, 0x4000, []byte{1, 1, 1, 0}, roce.Port, ud))},
		{b: eth(ipv6(46<<2|1, 17, nil, ud))},
		{b: eth(ipv6(0, 0, append(extHdr(60, 8), extHdr(17, 16)...), send))},
		{b: eth(firstFrag)},
		{b: eth(ipv4(0, 185, nil, roce.Port, send))},
		{b: eth(ipv6(0, 44, fragHdr(17, 0, true, 9), send))},
		{b: eth(ipv6(0, 44, fragHdr(17, 1448, false, 9), send))},
		{b: eth(ipv4(0, 0x4000, nil, 53, send))},
		{b: plain[:14+28+6], wire: len(plain)},
		{b: plain[:14+20+4], wire: len(plain)},
		{b: plain[:14+14], wire: len(plain)},
		{iface: 1, b: sll2(4, ipv4(0x02, 0x4000, nil, roce.Port, send))},
		{iface: 1, b: sll2(0, ipv6(0, 17, nil, ud))},
		{iface: 2, b: append([]byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x81, 0x00, 0x60, 0x07, 0x08, 0x00}, ipv4(0x02, 0x4000, nil, roce.Port, send)...)},
	}
}

// oracleTime is packet i's timestamp: interface 0 counts microseconds, 1
// nanoseconds, 2 microseconds.
func oracleTime(i int, f oracleFrame) time.Time {
	return time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC).Add(time.Duration(i)*time.Millisecond + time.Duration(f.iface)*123*time.Nanosecond)
}

func writeOracle(t *testing.T, path string, frames []oracleFrame) {
	t.Helper()
	b := ngSHB(le)
	b = append(b, ngIDB(le, oracleLinkTypes[0], 0)...)
	b = append(b, ngIDB(le, oracleLinkTypes[1], 0, ngOpt(le, 9, []byte{9}))...)
	b = append(b, ngIDB(le, oracleLinkTypes[2], 0)...)
	for i, f := range frames {
		ts := oracleTime(i, f).UnixMicro()
		if f.iface == 1 {
			ts = oracleTime(i, f).UnixNano()
		}
		b = append(b, ngEPB(le, uint32(f.iface), uint64(ts), f.b, uint32(f.wire))...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rbridgeView renders Decode's record of p as tshark prints tsharkFields.
func rbridgeView(p capture.Packet, r *capture.Record) []string {
	v := make(map[string]string)
	if tm, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
		v["frame.time_epoch"] = fmt.Sprintf("%d.%09d", tm.Unix(), tm.Nanosecond())
	}
	v["frame.len"], v["frame.cap_len"] = strconv.Itoa(p.Length), strconv.Itoa(len(p.Data))
	if c := r.Cooked; c != nil {
		if c.IfIndex != 0 {
			v["sll.ifindex"] = strconv.Itoa(int(c.IfIndex))
		}
		v["sll.pkttype"] = strconv.Itoa(map[string]int{"host": 0, "broadcast": 1, "multicast": 2, "otherhost": 3, "outgoing": 4}[c.PacketType])
		v["sll.hatype"] = strconv.Itoa(int(c.ARPHRD))
	}
	// tshark shows 802.1ad service tags and 802.1Q tags as two protocols.
	for _, proto := range []struct {
		name string
		tpid uint16
	}{{"ieee8021ad", 0x88a8}, {"vlan", 0x8100}} {
		var ids, pcps, deis []string
		for _, t := range r.VLAN {
			if t.TPID == proto.tpid {
				ids = append(ids, strconv.Itoa(int(t.ID)))
				pcps = append(pcps, strconv.Itoa(int(t.PCP)))
				deis = append(deis, b01(t.DEI))
			}
		}
		n := proto.name
		v[n+".id"], v[n+".priority"], v[n+".dei"] = strings.Join(ids, ","), strings.Join(pcps, ","), strings.Join(deis, ",")
	}
	if ip := r.IP; ip != nil && ip.Version == 4 {
		v["ip.src"], v["ip.dst"] = ip.Src, ip.Dst
		v["ip.dsfield.dscp"], v["ip.dsfield.ecn"] = strconv.Itoa(int(ip.DSCP)), strconv.Itoa(int(ip.ECN))
		v["ip.ttl"], v["ip.flags.df"] = strconv.Itoa(int(ip.TTL)), b01(*ip.DF)
		v["ip.flags.mf"], v["ip.frag_offset"] = "0", "0"
		if f := ip.Frag; f != nil { // tshark counts the offset in 8-byte units
			v["ip.flags.mf"], v["ip.frag_offset"] = b01(f.More), strconv.Itoa(f.Offset/8)
		}
		v["ip.id"] = fmt.Sprintf("%#04x", *ip.ID)
	}
	if ip := r.IP; ip != nil && ip.Version == 6 {
		v["ipv6.src"], v["ipv6.dst"] = ip.Src, ip.Dst
		v["ipv6.tclass.dscp"], v["ipv6.tclass.ecn"] = strconv.Itoa(int(ip.DSCP)), strconv.Itoa(int(ip.ECN))
		v["ipv6.hlim"], v["ipv6.flow"] = strconv.Itoa(int(ip.TTL)), fmt.Sprintf("0x%06x", *ip.FlowLabel)
		if f := ip.Frag; f != nil {
			v["ipv6.fraghdr.offset"], v["ipv6.fraghdr.more"], v["ipv6.fraghdr.ident"] = strconv.Itoa(f.Offset/8), b01(f.More), fmt.Sprintf("0x%08x", f.ID)
		}
	}
	if r.Src != "" {
		v["udp.srcport"] = r.Src[strings.LastIndexByte(r.Src, ':')+1:]
		v["udp.dstport"] = r.Dst[strings.LastIndexByte(r.Dst, ':')+1:]
	}
	if h := r.Headers; h != nil {
		v["infiniband.bth.opcode"] = strconv.Itoa(int(h.OpcodeNum))
		v["infiniband.bth.destqp"] = fmt.Sprintf("0x%06x", h.DQPN)
		v["infiniband.bth.psn"] = strconv.Itoa(int(h.PSN))
	}
	out := make([]string, len(tsharkFields))
	for i, f := range tsharkFields {
		out[i] = v[f]
	}
	return out
}

func b01(x bool) string {
	if x {
		return "1"
	}
	return "0"
}

// compareWithTshark decodes the capture at path and compares every packet
// with tshark's row for it.
func compareWithTshark(t *testing.T, path string, out []byte) {
	t.Helper()
	var rows [][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		rows = append(rows, strings.Split(sc.Text(), "|"))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pkts, err := readAll(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(pkts) {
		t.Fatalf("tshark shows %d packets, Reader reads %d", len(rows), len(pkts))
	}
	ib := slices.Index(tsharkFields, "infiniband.bth.opcode")
	for i, p := range pkts {
		rec := capture.Decode(i+1, p)
		want := rows[i]
		if rec.IP != nil && rec.IP.Frag != nil {
			// tshark dissects the BTH in a first fragment; Decode stops
			// at the UDP ports of a fragment, which is not RoCEv2.
			clear(want[ib:])
		}
		if rec.IP != nil && (rec.IP.Proto == 1 || rec.IP.Proto == 58) {
			// An ICMP error: tshark dissects the packet it quotes too,
			// Decode does not. Compare the outer headers.
			for j := range want {
				want[j], _, _ = strings.Cut(want[j], ",")
				if j >= slices.Index(tsharkFields, "udp.srcport") {
					want[j] = ""
				}
			}
		}
		if rec.IP == nil && rec.Cut() {
			// Cut inside the IP header: tshark shows the fields before
			// the cut, Decode none, and neither shows the addresses.
			for j, f := range tsharkFields {
				if (strings.HasPrefix(f, "ip.") || strings.HasPrefix(f, "ipv6.")) && !strings.HasSuffix(f, "src") && !strings.HasSuffix(f, "dst") {
					want[j] = ""
				}
			}
		}
		if diff := cmp.Diff(want, rbridgeView(p, rec)); diff != "" {
			t.Errorf("packet %d (%s): (-tshark +rbridge):\n%s", i+1, rec.Text(), diff)
		}
	}
}

func runTshark(t *testing.T, tshark, path string) []byte {
	t.Helper()
	// No reassembly: Decode names fragments, it does not reassemble them.
	args := []string{"-r", path, "-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE", "-T", "fields", "-E", "separator=|"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// TestTsharkGolden compares Decode with what tshark printed for the
// committed captures, and checks that the frames built now are still those
// of the oracle capture.
func TestTsharkGolden(t *testing.T) {
	for _, c := range [][2]string{{oraclePcapng, oracleTshark}, {linuxAnyPath, linuxAnyTshark}} {
		golden, err := os.ReadFile(c[1])
		if err != nil {
			t.Fatal(err)
		}
		compareWithTshark(t, c[0], golden)
	}
	now := filepath.Join(t.TempDir(), "oracle.pcapng")
	writeOracle(t, now, oracleFrames())
	a, _ := os.ReadFile(now)
	b, _ := os.ReadFile(oraclePcapng)
	if !bytes.Equal(a, b) {
		t.Errorf("the oracle frames changed since %s was written: run go test ./roce/capture -run Tshark -update", oraclePcapng)
	}
}

// TestTsharkOracle runs tshark on the oracle frames built now and on the
// kernel's capture.
func TestTsharkOracle(t *testing.T) {
	tshark := requireTool(t, "tshark", "--version")
	path := filepath.Join(t.TempDir(), "oracle.pcapng")
	if *update {
		path = oraclePcapng
	}
	writeOracle(t, path, oracleFrames())
	for _, c := range [][2]string{{path, oracleTshark}, {linuxAnyPath, linuxAnyTshark}} {
		out := runTshark(t, tshark, c[0])
		if *update {
			if err := os.WriteFile(c[1], out, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		compareWithTshark(t, c[0], out)
	}
}

// requireTool returns the path of a tool, or skips (fails under
// RBRIDGE_REQUIRE_ORACLES=1) naming what is missing.
func requireTool(t *testing.T, path string, probe ...string) string {
	t.Helper()
	p, err := exec.LookPath(path)
	if err == nil && len(probe) > 0 {
		err = exec.Command(p, probe...).Run()
	}
	if err != nil {
		msg := fmt.Sprintf("oracle %s unavailable (%v): run `make deps`", path, err)
		if os.Getenv("RBRIDGE_REQUIRE_ORACLES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}
