package capture_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/rbridge/rbridge/roce/capture"
)

// specKeys is every key a JSON record may have.
var specKeys = map[string]bool{
	"n": true, "roce": true, "src": true, "dst": true, "opcode": true, "opcode_num": true, "se": true,
	"migreq": true, "pad": true, "pkey": true, "fecn": true, "becn": true, "dqpn": true, "ackreq": true,
	"psn": true, "payload_len": true, "icrc": true, "icrc_ok": true, "reth": true, "aeth": true,
	"imm": true, "ieth": true, "deth": true, "atomic_eth": true, "atomic_ack_eth": true, "error": true,
	// Added since: existing keys keep their meaning.
	"rdeth": true, "xrceth": true, "time": true, "cooked": true, "vlan": true, "ip": true,
	"not_roce": true, "note": true,
}

// jsonLines parses Dump's JSON output and checks that every key is one the
// documentation names.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		for k := range m {
			if !specKeys[k] {
				t.Errorf("line %q: key %q is not in the documented set", sc.Text(), k)
			}
		}
		recs = append(recs, m)
	}
	return recs
}

// dumpFrom runs Dump on the capture read from in.
func dumpFrom(w io.Writer, in io.Reader, f capture.Format) (capture.Stats, error) {
	r, err := capture.NewReader(in)
	if err != nil {
		return capture.Stats{}, err
	}
	return capture.Dump(w, r, f)
}

// dump runs Dump on the capture at path.
func dump(t *testing.T, path string, f capture.Format) (string, capture.Stats) {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	st, err := dumpFrom(&out, in, f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out.String(), st
}

// TestDecodeJSONMatchesScapy decodes scapy's vectors to JSON and checks
// every field scapy built each packet with.
func TestDecodeJSONMatchesScapy(t *testing.T) {
	out, _ := dump(t, "../testdata/scapy.pcap", capture.JSON)
	got := jsonLines(t, out)
	wantFile, err := os.ReadFile("../testdata/scapy.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := jsonLines(t, string(wantFile))
	if len(got) != len(want) {
		t.Fatalf("%d records, scapy built %d", len(got), len(want))
	}
	for i := range want {
		if got[i]["n"] != json.Number(strconv.Itoa(i+1)) || got[i]["roce"] != true || got[i]["icrc_ok"] != true {
			t.Errorf("record %d: n=%v roce=%v icrc_ok=%v", i+1, got[i]["n"], got[i]["roce"], got[i]["icrc_ok"])
		}
		for k, v := range want[i] {
			if !cmp.Equal(v, got[i][k]) {
				t.Errorf("record %d key %s: got %v, scapy built %v", i+1, k, got[i][k], v)
			}
		}
		// Headers the opcode does not carry are absent.
		for _, k := range []string{"reth", "aeth", "imm", "ieth", "deth", "atomic_eth", "atomic_ack_eth"} {
			if _, ok := want[i][k]; !ok && got[i][k] != nil {
				t.Errorf("record %d: unexpected %s", i+1, k)
			}
		}
	}
}

func TestDecodeSampleText(t *testing.T) {
	out, st := dump(t, samplePath, capture.Text)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20:\n%s", len(lines), out)
	}
	for i, want := range map[int][]string{
		0:  {"10.0.0.1:", "> 10.0.0.2:4791", "RC_SEND_ONLY", "qp=0x000012", "psn=100", " A ", "len=33", "pad=3", "ok"},
		2:  {"RC_RDMA_WRITE_FIRST", "reth(va=0x7f3a00001000 rkey=0x2d01 len=2500)", "len=1024"},
		10: {"RC_ATOMIC_ACKNOWLEDGE", "aeth(ACK credits=31 msn=4)", "atomic_ack(orig=0x29)"},
		11: {"ECN-CE"},
		12: {"CNP", "BECN"},
		13: {"NAK PSN_SEQUENCE_ERROR"},
		15: {"RNR_NAK timer=14"},
		16: {"[fd00::1]:", "UD_SEND_ONLY", "deth(qkey=0x11111111 sqpn=0x000021)"},
		17: {"BAD"},
		18: {"CUT: the capture kept 60 of the packet's 1098 bytes"},
		19: {"not RoCEv2 (IPv4 protocol"},
	} {
		for _, s := range want {
			if !strings.Contains(lines[i], s) {
				t.Errorf("line %d %q lacks %q", i+1, lines[i], s)
			}
		}
	}
	if got, want := st.String(), "20 packets: 19 RoCEv2 (1 with a bad ICRC, 1 cut by the capture), 0 malformed, 1 other"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

func TestDecodeSampleJSON(t *testing.T) {
	out, _ := dump(t, samplePath, capture.JSON)
	recs := jsonLines(t, out)
	if len(recs) != 20 {
		t.Fatalf("%d records", len(recs))
	}
	if r := recs[17]; r["icrc_ok"] != false || !strings.Contains(r["error"].(string), "ICRC mismatch") {
		t.Errorf("corrupted packet: %v", r)
	}
	if r := recs[18]; r["icrc_ok"] != nil || r["opcode"] != "RC_RDMA_WRITE_ONLY" || r["reth"] != nil || r["error"] == nil {
		t.Errorf("packet cut inside its RETH: %v", r)
	}
	if r := recs[19]; r["roce"] != false || r["error"] != nil || r["opcode"] != nil {
		t.Errorf("ICMP packet: %v", r)
	}
	if r := recs[9]; !cmp.Equal(r["atomic_eth"], map[string]any{"va": json.Number("139887084838912"), "rkey": json.Number("11521"), "swap_add": json.Number("1"), "compare": json.Number("0")}) {
		t.Errorf("FETCH_ADD atomic_eth: %v", r["atomic_eth"])
	}
}

// writeCapture writes frames as a pcap with the given link type.
func writeCapture(t *testing.T, lt layers.LinkType, frames ...[]byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	for _, b := range frames {
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(b), Length: len(b)}, b); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "c.pcap")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecodeLinkTypes(t *testing.T) {
	frames, _ := sampleFrames(t)
	eth := frames[0]
	sll := append(make([]byte, 14), 0x08, 0x00)
	sll = append(sll, eth[14:]...)
	// Linux cooked v2: IPv4, interface 3, ARPHRD_ETHER, outgoing, a 6-byte
	// address.
	sll2 := append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0}, eth[14:]...)
	sll2v6 := append([]byte{0x86, 0xdd, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}, frames[16][14:]...)
	arp := append([]byte{0x08, 0x06}, sll2[2:]...)
	for _, tc := range []struct {
		name   string
		lt     uint32
		b      []byte
		opcode any
	}{
		{"raw IP", 101, eth[14:], "RC_SEND_ONLY"},
		{"IPv4", 228, eth[14:], "RC_SEND_ONLY"},
		{"Linux cooked", 113, sll, "RC_SEND_ONLY"},
		{"Linux cooked v2", 276, sll2, "RC_SEND_ONLY"},
		{"Linux cooked v2, IPv6", 276, sll2v6, "UD_SEND_ONLY"},
	} {
		p := filepath.Join(t.TempDir(), "c.pcap")
		if err := os.WriteFile(p, pcapFile(le, false, 65535, tc.lt, pcapRec{data: tc.b}), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := dump(t, p, capture.JSON)
		r := jsonLines(t, out)[0]
		if r["opcode"] != tc.opcode || r["icrc_ok"] != true {
			t.Errorf("%s: %v", tc.name, r)
		}
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"ARP", arp, "not RoCEv2 (EtherType 0x0806 (ARP)) ifindex=3 outgoing"},
		{"cut in the header", sll2[:19], "not RoCEv2: Linux cooked v2 header truncated: it needs 20 bytes, the packet has 19"},
	} {
		p := filepath.Join(t.TempDir(), "c.pcap")
		if err := os.WriteFile(p, pcapFile(le, false, 65535, 276, pcapRec{data: tc.b}), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, _ := dump(t, p, capture.Text); !strings.Contains(out, tc.want) {
			t.Errorf("Linux cooked v2, %s: %q, want %q", tc.name, out, tc.want)
		}
	}
	// Link types Decode does not read are refused by their number, also
	// above 255 (257 is not Ethernet).
	for _, tc := range []struct {
		lt   uint32
		want string
	}{
		{105, "link type IEEE802_11 (105) is not supported"},
		{257, "link type LINKTYPE_257 (257) is not supported"},
	} {
		p := filepath.Join(t.TempDir(), "c.pcap")
		if err := os.WriteFile(p, pcapFile(le, false, 65535, tc.lt, pcapRec{data: eth}), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _ := dump(t, p, capture.JSON)
		if r := jsonLines(t, out)[0]; r["roce"] != false || !strings.HasPrefix(r["error"].(string), tc.want) {
			t.Errorf("link type %d: %v, want an error starting %q", tc.lt, r, tc.want)
		}
	}
}

func TestDumpErrors(t *testing.T) {
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	pcapFile, err := os.ReadFile("../testdata/scapy.pcap")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"not a capture", []byte("hello, world"), "not a pcap or pcapng file"},
		{"empty", nil, "empty or truncated"},
		{"pcapng cut in a block", sample[:len(sample)-100], "after packet 18: pcapng: the file ends inside a block"},
		{"pcap cut in a packet", pcapFile[:len(pcapFile)-10], "after packet 37"},
	} {
		_, err := dumpFrom(&bytes.Buffer{}, bytes.NewReader(tc.in), capture.Text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestDumpFollowsAPipe writes a capture into a pipe packet by packet and
// reads each packet's line before the next packet is written, as a live
// capture (tcpdump -U -w - | rbridge decode -) needs.
func TestDumpFollowsAPipe(t *testing.T) {
	frames, _ := sampleFrames(t)
	file := pcapFile(le, false, 65535, 1, pcapRec{sec: 1, data: frames[0]}, pcapRec{sec: 2, data: frames[1]})
	hdrAndFirst, second := file[:24+16+len(frames[0])], file[24+16+len(frames[0]):]
	for _, f := range []capture.Format{capture.Text, capture.JSON} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := dumpFrom(outW, inR, f)
			outW.CloseWithError(err)
			done <- err
		}()
		lines := bufio.NewReader(outR)
		for i, chunk := range [][]byte{hdrAndFirst, second} {
			if _, err := inW.Write(chunk); err != nil {
				t.Fatal(err)
			}
			line, err := readLine(lines, 10*time.Second)
			if err != nil {
				t.Fatalf("format %d: packet %d written, its line not read: %v", f, i+1, err)
			}
			if !strings.Contains(line, []string{"RC_SEND_ONLY", "RC_ACKNOWLEDGE"}[i]) {
				t.Errorf("format %d: line %d %q", f, i+1, line)
			}
		}
		inW.Close()
		if err := <-done; err != nil {
			t.Errorf("format %d: %v", f, err)
		}
	}
}

// readLine reads a line from r, or gives up after d.
func readLine(r *bufio.Reader, d time.Duration) (string, error) {
	type result struct {
		s   string
		err error
	}
	c := make(chan result, 1)
	go func() {
		s, err := r.ReadString('\n')
		c <- result{s, err}
	}()
	select {
	case res := <-c:
		return res.s, res.err
	case <-time.After(d):
		return "", fmt.Errorf("no line after %v", d)
	}
}

// BenchmarkDump decodes the sample capture to text and to JSON.
func BenchmarkDump(b *testing.B) {
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []struct {
		name string
		f    capture.Format
	}{{"text", capture.Text}, {"json", capture.JSON}} {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(sample)))
			for b.Loop() {
				if _, err := dumpFrom(io.Discard, bytes.NewReader(sample), f.f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
