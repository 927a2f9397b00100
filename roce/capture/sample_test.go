package capture_test

import (
	"bytes"
	"flag"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

var update = flag.Bool("update", false, "rewrite ../../testdata/sample.pcapng")

const samplePath = "../../testdata/sample.pcapng"

// frameSpec is one packet of the sample conversation.
type frameSpec struct {
	fwd     bool // 10.0.0.1 -> 10.0.0.2 (else back)
	v6      bool
	ecn     uint8
	f       roce.PacketFields
	payload []byte
}

// buildFrame serializes an Ethernet/IP/UDP/RoCEv2 frame with a correct ICRC.
func buildFrame(t testing.TB, s frameSpec) []byte {
	t.Helper()
	a, b := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	src4, dst4 := net.IPv4(10, 0, 0, 1), net.IPv4(10, 0, 0, 2)
	src6, dst6 := net.ParseIP("fd00::1"), net.ParseIP("fd00::2")
	if !s.fwd {
		a, b, src4, dst4, src6, dst6 = b, a, dst4, src4, dst6, src6
	}
	eth := &layers.Ethernet{SrcMAC: a, DstMAC: b, EthernetType: layers.EthernetTypeIPv4}
	udp := &layers.UDP{SrcPort: layers.UDPPort(roce.SourcePort(0, 0x11, 0x12)), DstPort: roce.Port}
	var ip gopacket.NetworkLayer
	if s.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip = &layers.IPv6{Version: 6, TrafficClass: s.ecn, NextHeader: layers.IPProtocolUDP, HopLimit: 64, SrcIP: src6, DstIP: dst6}
	} else {
		ip = &layers.IPv4{Version: 4, TOS: s.ecn, Flags: layers.IPv4DontFragment, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src4, DstIP: dst4}
	}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	r := &roce.RoCEv2{PacketFields: s.f}
	if err := r.SetNetworkLayerForICRC(ip, udp); err != nil {
		t.Fatal(err)
	}
	ls := []gopacket.SerializableLayer{eth, ip.(gopacket.SerializableLayer), udp, r}
	if len(s.payload) > 0 {
		ls = append(ls, gopacket.Payload(s.payload))
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// sampleFrames is a short, synthetic RC conversation between QP 0x11 on
// 10.0.0.1 and QP 0x12 on 10.0.0.2 with one of every kind of thing decode
// reports: sends, a segmented RDMA WRITE, an RDMA READ, an atomic, NAKs, an
// ECN-marked packet and the CNP that answers it, a UD datagram over IPv6, a
// packet with a corrupted ICRC, a truncated packet and a non-RoCE packet.
func sampleFrames(t testing.TB) (frames [][]byte, origLen map[int]int) {
	bth := func(op roce.Opcode, qp, psn uint32, ack bool) roce.BTHFields {
		return roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: qp, PSN: psn, AckReq: ack}
	}
	aeth := func(s roce.Syndrome, msn uint32) roce.AETHFields { return roce.AETHFields{Syndrome: s, MSN: msn} }
	const va, rkey = 0x7f3a_0000_1000, 0x2d01
	msg := []byte("rbridge: hello across the gateway")
	seg := bytes.Repeat([]byte{0x5a}, 1024)
	ack := roce.ACKSyndrome(roce.CreditsInvalid)
	specs := []frameSpec{
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCSendOnly, 0x12, 100, true)}, payload: msg},
		{f: roce.PacketFields{BTH: bth(roce.RCAcknowledge, 0x11, 100, false), AETH: aeth(ack, 1)}},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCRDMAWriteFirst, 0x12, 101, false), RETH: roce.RETHFields{VA: va, RKey: rkey, DMALen: 2500}}, payload: seg},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCRDMAWriteMiddle, 0x12, 102, false)}, payload: seg},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCRDMAWriteLastWithImmediate, 0x12, 103, true), ImmDt: roce.ImmDtFields{Imm: 0x1234}}, payload: seg[:452]},
		{f: roce.PacketFields{BTH: bth(roce.RCAcknowledge, 0x11, 103, false), AETH: aeth(ack, 2)}},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCRDMAReadRequest, 0x12, 104, true), RETH: roce.RETHFields{VA: va, RKey: rkey, DMALen: 2048}}},
		{f: roce.PacketFields{BTH: bth(roce.RCRDMAReadResponseFirst, 0x11, 104, false), AETH: aeth(ack, 3)}, payload: seg},
		{f: roce.PacketFields{BTH: bth(roce.RCRDMAReadResponseLast, 0x11, 105, false), AETH: aeth(ack, 3)}, payload: seg},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCFetchAdd, 0x12, 106, true), AtomicETH: roce.AtomicETHFields{VA: va + 4096, RKey: rkey, SwapAdd: 1}}},
		{f: roce.PacketFields{BTH: bth(roce.RCAtomicAcknowledge, 0x11, 106, false), AETH: aeth(ack, 4), AtomicAckETH: roce.AtomicAckETHFields{Orig: 41}}},
		{fwd: true, ecn: roce.ECNCE, f: roce.PacketFields{BTH: bth(roce.RCSendOnly, 0x12, 108, true)}, payload: msg},
		{f: roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.CNP, PKey: roce.DefaultPKey, BECN: true, DestQP: 0x11}}},
		{f: roce.PacketFields{BTH: bth(roce.RCAcknowledge, 0x11, 107, false), AETH: aeth(roce.NAKSyndrome(roce.NAKPSNSequenceError), 4)}},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCSendOnlyWithImmediate, 0x12, 107, true), ImmDt: roce.ImmDtFields{Imm: 7}}, payload: msg},
		{f: roce.PacketFields{BTH: bth(roce.RCAcknowledge, 0x11, 107, false), AETH: aeth(roce.RNRSyndrome(14), 4)}},
		{fwd: true, v6: true, f: roce.PacketFields{BTH: bth(roce.UDSendOnly, 0x20, 5, false), DETH: roce.DETHFields{QKey: 0x11111111, SrcQP: 0x21}}, payload: msg},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCSendOnly, 0x12, 109, true)}, payload: msg},
		{fwd: true, f: roce.PacketFields{BTH: bth(roce.RCRDMAWriteOnly, 0x12, 110, true), RETH: roce.RETHFields{VA: va, RKey: rkey, DMALen: 1024}}, payload: seg},
	}
	for _, s := range specs {
		frames = append(frames, buildFrame(t, s))
	}
	// Corrupt one payload byte of the second-to-last packet: its ICRC no
	// longer matches. Cut the last one short of its RETH.
	last := len(frames) - 1
	frames[last-1][60] ^= 0x01
	origLen = map[int]int{last: len(frames[last])}
	frames[last] = frames[last][:14+20+8+12+6]
	// And a packet that is not RoCEv2: an ICMP echo request.
	icmp := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(icmp, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	return append(frames, bytes.Clone(icmp.Bytes())), origLen
}

func writeSample(t *testing.T, path string, frames [][]byte, origLen map[int]int) {
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * 7 * time.Microsecond), CaptureLength: len(b), Length: len(b)}
		if n, ok := origLen[i]; ok {
			ci.Length = n // cut by the capture: the wire had more
		}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSampleCapture checks the capture the README decodes, and rewrites it
// with -update.
func TestSampleCapture(t *testing.T) {
	if *update {
		frames, origLen := sampleFrames(t)
		writeSample(t, samplePath, frames, origLen)
	}
	f, err := os.Open(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	st, err := dumpFrom(&out, f, capture.Text)
	if err != nil {
		t.Fatal(err)
	}
	want := capture.Stats{Packets: 20, RoCE: 19, Other: 1, BadICRC: 1, Cut: 1}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("stats (-want +got):\n%s\n%s", diff, out.String())
	}
}
