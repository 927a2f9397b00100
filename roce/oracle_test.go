package roce_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/rbridge/rbridge/roce"
)

// The independent oracles: scapy's RoCE module builds packets that rbridge
// must decode, and Wireshark's InfiniBand dissector (tshark) dissects packets
// that rbridge serializes. Their outputs are kept in testdata/ so the unit
// tests run without those tools; with the tools present (make deps installs
// them) the tests also run them live. RBRIDGE_REQUIRE_ORACLES=1 (set by
// make test) turns a missing tool into a failure.

var update = flag.Bool("update", false, "rewrite testdata/rbridge.pcap and testdata/rbridge.tshark")

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

// scapyRecord is one line of scapy_vectors.py's JSON output.
type scapyRecord struct {
	OpcodeNum  uint8  `json:"opcode_num"`
	DQPN       uint32 `json:"dqpn"`
	PSN        uint32 `json:"psn"`
	PKey       uint16 `json:"pkey"`
	SE         bool   `json:"se"`
	AckReq     bool   `json:"ackreq"`
	BECN       bool   `json:"becn"`
	Pad        int    `json:"pad"`
	PayloadLen int    `json:"payload_len"`
	RETH       *struct {
		VA     uint64 `json:"va"`
		RKey   uint32 `json:"rkey"`
		DMALen uint32 `json:"dma_len"`
	} `json:"reth"`
	AETH *struct {
		Syndrome uint8  `json:"syndrome"`
		MSN      uint32 `json:"msn"`
	} `json:"aeth"`
	Imm  *uint32 `json:"imm"`
	IETH *struct {
		RKey uint32 `json:"rkey"`
	} `json:"ieth"`
	DETH *struct {
		QKey uint32 `json:"qkey"`
		SQPN uint32 `json:"sqpn"`
	} `json:"deth"`
	AtomicETH *struct {
		VA      uint64 `json:"va"`
		RKey    uint32 `json:"rkey"`
		SwapAdd uint64 `json:"swap_add"`
		Compare uint64 `json:"compare"`
	} `json:"atomic_eth"`
	AtomicAckETH *struct {
		Orig uint64 `json:"orig"`
	} `json:"atomic_ack_eth"`
}

// asFields turns a scapy record into the PacketFields rbridge should decode.
func (r *scapyRecord) asFields() roce.PacketFields {
	f := roce.PacketFields{BTH: roce.BTHFields{
		Opcode: roce.Opcode(r.OpcodeNum), SE: r.SE, PadCount: uint8(r.Pad), PKey: r.PKey,
		BECN: r.BECN, DestQP: r.DQPN, AckReq: r.AckReq, PSN: r.PSN,
	}}
	if r.RETH != nil {
		f.RETH = roce.RETHFields{VA: r.RETH.VA, RKey: r.RETH.RKey, DMALen: r.RETH.DMALen}
	}
	if r.AETH != nil {
		f.AETH = roce.AETHFields{Syndrome: roce.Syndrome(r.AETH.Syndrome), MSN: r.AETH.MSN}
	}
	if r.Imm != nil {
		f.ImmDt.Imm = *r.Imm
	}
	if r.IETH != nil {
		f.IETH.RKey = r.IETH.RKey
	}
	if r.DETH != nil {
		f.DETH = roce.DETHFields{QKey: r.DETH.QKey, SrcQP: r.DETH.SQPN}
	}
	if a := r.AtomicETH; a != nil {
		f.AtomicETH = roce.AtomicETHFields{VA: a.VA, RKey: a.RKey, SwapAdd: a.SwapAdd, Compare: a.Compare}
	}
	if r.AtomicAckETH != nil {
		f.AtomicAckETH.Orig = r.AtomicAckETH.Orig
	}
	return f
}

func readPcap(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, data)
	}
}

// checkScapyVectors decodes every packet of a scapy capture and compares it
// with the fields scapy built it from.
func checkScapyVectors(t *testing.T, pcapPath, jsonPath string) {
	t.Helper()
	frames := readPcap(t, pcapPath)
	jf, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var recs []scapyRecord
	for line := range strings.SplitSeq(strings.TrimSpace(string(jf)), "\n") {
		var r scapyRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", jsonPath, err)
		}
		recs = append(recs, r)
	}
	if len(frames) != len(recs) || len(frames) < 38 {
		t.Fatalf("%d packets, %d records; want equal and at least 38", len(frames), len(recs))
	}
	for i, b := range frames {
		var f roce.Frame
		if err := f.DecodeEthernet(b); err != nil {
			t.Errorf("packet %d: %v", i+1, err)
			continue
		}
		if err := f.VerifyICRC(); err != nil {
			t.Errorf("packet %d (%v): scapy's ICRC: %v", i+1, f.Packet.Opcode(), err)
		}
		if diff := cmp.Diff(recs[i].asFields(), f.Packet.Fields()); diff != "" {
			t.Errorf("packet %d: fields (-scapy +rbridge):\n%s", i+1, diff)
		}
		if len(f.Packet.Payload) != recs[i].PayloadLen {
			t.Errorf("packet %d: payload %d bytes, scapy built %d", i+1, len(f.Packet.Payload), recs[i].PayloadLen)
		}
	}
}

// TestScapyVectors checks the committed vectors (no tools needed).
func TestScapyVectors(t *testing.T) {
	checkScapyVectors(t, "testdata/scapy.pcap", "testdata/scapy.jsonl")
}

// TestScapyOracle builds the vectors with scapy now and checks them.
func TestScapyOracle(t *testing.T) {
	py := requireTool(t, "/usr/bin/python3", "-c", "import scapy.contrib.roce")
	dir := t.TempDir()
	pcap, js := filepath.Join(dir, "v.pcap"), filepath.Join(dir, "v.jsonl")
	out, err := exec.Command(py, "testdata/scapy_vectors.py", pcap, js).CombinedOutput()
	if err != nil {
		t.Fatalf("scapy_vectors.py: %v\n%s", err, out)
	}
	checkScapyVectors(t, pcap, js)
}

// tsharkFields are the dissector fields compared with rbridge's view.
var tsharkFields = []string{
	"infiniband.bth.opcode", "infiniband.bth.se", "infiniband.bth.m", "infiniband.bth.padcnt",
	"infiniband.bth.p_key", "infiniband.bth.destqp", "infiniband.bth.a", "infiniband.bth.psn",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.immdt", "infiniband.ieth",
	"infiniband.deth.q_key", "infiniband.deth.srcqp", "infiniband.atomiceth.swapdt",
	"infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt", "infiniband.invariant.crc",
}

// rbridgeView renders a decoded packet as tshark prints tsharkFields, one
// value per field, empty where the packet has no such field.
func rbridgeView(f *roce.Frame) []string {
	p := &f.Packet
	h := p.BTH
	v := make([]string, len(tsharkFields))
	b01 := func(x bool) string {
		if x {
			return "1"
		}
		return "0"
	}
	v[0] = strconv.Itoa(int(h.Opcode()))
	v[1], v[2] = b01(h.SE()), b01(h.MigReq())
	v[3] = strconv.Itoa(h.PadCount())
	v[4] = strconv.Itoa(int(h.PKey()))
	v[5] = fmt.Sprintf("0x%06x", h.DestQP())
	v[6] = b01(h.AckReq())
	v[7] = strconv.Itoa(int(h.PSN()))
	// The dissector shows an AtomicETH's VA and R_Key in the RETH fields.
	switch {
	case p.RETH != nil:
		v[8], v[9], v[10] = fmt.Sprintf("0x%016x", p.RETH.VA()), fmt.Sprintf("0x%08x", p.RETH.RKey()), strconv.Itoa(int(p.RETH.DMALen()))
	case p.AtomicETH != nil:
		v[8], v[9] = fmt.Sprintf("0x%016x", p.AtomicETH.VA()), fmt.Sprintf("0x%08x", p.AtomicETH.RKey())
	}
	if p.AETH != nil {
		v[11], v[12] = strconv.Itoa(int(p.AETH.Syndrome())), strconv.Itoa(int(p.AETH.MSN()))
	}
	if p.ImmDt != nil {
		v[13] = fmt.Sprintf("%x", []byte(p.ImmDt))
	}
	if p.IETH != nil {
		v[14] = fmt.Sprintf("%x", []byte(p.IETH))
	}
	if p.DETH != nil {
		v[15], v[16] = fmt.Sprintf("0x%016x", p.DETH.QKey()), fmt.Sprintf("0x%08x", p.DETH.SrcQP())
	}
	if p.AtomicETH != nil {
		v[17], v[18] = strconv.FormatUint(p.AtomicETH.SwapAdd(), 10), strconv.FormatUint(p.AtomicETH.Compare(), 10)
	}
	if p.AtomicAckETH != nil {
		v[19] = strconv.FormatUint(p.AtomicAckETH.Orig(), 10)
	}
	if h.Opcode() != roce.CNP { // the dissector does not show a CNP's ICRC
		// Wireshark prints the trailer's bytes in wire order.
		v[20] = fmt.Sprintf("0x%08x", bits.ReverseBytes32(p.ICRC))
	}
	return v
}

// parseTshark splits tshark's -T fields output; a field that occurs twice
// (tshark adds the ImmDt and IETH items twice) keeps its first value.
func parseTshark(out []byte) [][]string {
	var rows [][]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "|")
		for i, c := range cols {
			cols[i], _, _ = strings.Cut(c, ",")
		}
		rows = append(rows, cols)
	}
	return rows
}

func compareWithTshark(t *testing.T, frames [][]byte, out []byte) {
	t.Helper()
	rows := parseTshark(out)
	if len(rows) != len(frames) {
		t.Fatalf("tshark dissected %d packets, want %d", len(rows), len(frames))
	}
	for i, b := range frames {
		var f roce.Frame
		if err := f.DecodeEthernet(b); err != nil {
			t.Fatalf("packet %d: %v", i+1, err)
		}
		want := rbridgeView(&f)
		if diff := cmp.Diff(rows[i], want); diff != "" {
			t.Errorf("packet %d (%v): (-tshark +rbridge):\n%s", i+1, f.Packet.Opcode(), diff)
		}
	}
}

// serializedFrames is every sample opcode over IPv4 and over IPv6, as
// rbridge's serializer builds them.
func serializedFrames(t *testing.T) [][]byte {
	var frames [][]byte
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			frames = append(frames, buildFrame(t, s, v6))
		}
	}
	return frames
}

func writePcap(t *testing.T, path string, frames [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for _, b := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1700000000, 0), CaptureLength: len(b), Length: len(b)}
		if err := w.WritePacket(ci, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func runTshark(t *testing.T, tshark, pcap string) []byte {
	t.Helper()
	args := []string{"-r", pcap, "-T", "fields", "-E", "separator=|"}
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

// TestTsharkGolden compares rbridge's decode of its own serialized packets
// with what tshark printed for the same bytes (committed; no tools needed),
// and checks that the serializer still produces those bytes.
func TestTsharkGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/rbridge.tshark")
	if err != nil {
		t.Fatal(err)
	}
	frames := readPcap(t, "testdata/rbridge.pcap")
	compareWithTshark(t, frames, golden)
	now := serializedFrames(t)
	if len(now) != len(frames) {
		t.Fatalf("serializer builds %d frames, golden has %d: run go test ./roce -run Tshark -update", len(now), len(frames))
	}
	for i := range now {
		if !bytes.Equal(now[i], frames[i]) {
			t.Errorf("frame %d: the serializer's bytes changed since testdata/rbridge.pcap was written", i+1)
		}
	}
}

// TestTsharkOracle runs tshark on packets rbridge serializes now.
func TestTsharkOracle(t *testing.T) {
	tshark := requireTool(t, "tshark", "--version")
	frames := serializedFrames(t)
	pcap := filepath.Join(t.TempDir(), "rbridge.pcap")
	if *update {
		pcap = "testdata/rbridge.pcap"
	}
	writePcap(t, pcap, frames)
	out := runTshark(t, tshark, pcap)
	if *update {
		if err := os.WriteFile("testdata/rbridge.tshark", out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	compareWithTshark(t, frames, out)
}
