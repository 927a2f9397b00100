package main

import (
	"bufio"
	"bytes"
	"encoding/json"
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
)

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, stdin []byte, args ...string) (string, string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(bytes.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

var specKeys = map[string]bool{
	"n": true, "roce": true, "src": true, "dst": true, "opcode": true, "opcode_num": true, "se": true,
	"migreq": true, "pad": true, "pkey": true, "fecn": true, "becn": true, "dqpn": true, "ackreq": true,
	"psn": true, "payload_len": true, "icrc": true, "icrc_ok": true, "reth": true, "aeth": true,
	"imm": true, "ieth": true, "deth": true, "atomic_eth": true, "atomic_ack_eth": true, "error": true,
}

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

// TestDecodeJSONMatchesScapy decodes scapy's vectors with --json and checks
// every field scapy built each packet with.
func TestDecodeJSONMatchesScapy(t *testing.T) {
	out, _, err := run(t, nil, "decode", "--json", "../../roce/testdata/scapy.pcap")
	if err != nil {
		t.Fatal(err)
	}
	got := jsonLines(t, out)
	wantFile, err := os.ReadFile("../../roce/testdata/scapy.jsonl")
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
	out, summary, err := run(t, nil, "decode", samplePath)
	if err != nil {
		t.Fatal(err)
	}
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
	if !strings.Contains(summary, "20 packets: 19 RoCEv2, 1 other, 0 malformed, 1 bad ICRC, 1 cut by the capture") {
		t.Errorf("summary %q", summary)
	}
}

func TestDecodeSampleJSON(t *testing.T) {
	out, _, err := run(t, nil, "decode", "--json", samplePath)
	if err != nil {
		t.Fatal(err)
	}
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
	for _, tc := range []struct {
		name string
		lt   layers.LinkType
		b    []byte
	}{
		{"raw IP", 101, eth[14:]},
		{"IPv4", 228, eth[14:]},
		{"Linux cooked", 113, sll},
	} {
		out, _, err := run(t, nil, "decode", "--json", writeCapture(t, tc.lt, tc.b))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := jsonLines(t, out)[0]
		if r["opcode"] != "RC_SEND_ONLY" || r["icrc_ok"] != true {
			t.Errorf("%s: %v", tc.name, r)
		}
	}
	out, _, err := run(t, nil, "decode", "--json", writeCapture(t, layers.LinkTypeIEEE802_11, eth))
	if err != nil {
		t.Fatal(err)
	}
	if r := jsonLines(t, out)[0]; !strings.Contains(r["error"].(string), "link type") {
		t.Errorf("802.11 capture: %v", r)
	}
}

func TestDecodeStdinAndErrors(t *testing.T) {
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	pcapFile, err := os.ReadFile("../../roce/testdata/scapy.pcap")
	if err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, sample, "decode", "-"); err != nil || strings.Count(out, "\n") != 20 {
		t.Errorf("stdin: %v, %d lines", err, strings.Count(out, "\n"))
	}
	for _, tc := range []struct {
		name  string
		stdin []byte
		args  []string
		want  string
	}{
		{"missing file", nil, []string{"decode", "/nonexistent.pcap"}, "no such file"},
		{"not a capture", []byte("hello, world"), []string{"decode", "-"}, "not a pcap or pcapng file"},
		{"empty", nil, []string{"decode", "-"}, "empty or truncated"},
		{"no file", nil, []string{"decode"}, "accepts 1 arg"},
		{"pcapng cut in a block", sample[:len(sample)-100], []string{"decode", "-"}, "after packet 18: pcapng: the file ends inside a block"},
		{"pcap cut in a packet", pcapFile[:len(pcapFile)-10], []string{"decode", "-"}, "after packet 37"},
	} {
		_, _, err := run(t, tc.stdin, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "rbridge ") || len(strings.TrimSpace(out)) <= len("rbridge ") {
		t.Errorf("version: %q, %v", out, err)
	}
}
