package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

const samplePath = "../../testdata/sample.pcapng"

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

// TestDecodeSample runs the README's tour's decode command: one line per packet of
// the sample capture on standard output, the summary on standard error.
func TestDecodeSample(t *testing.T) {
	out, summary, err := run(t, nil, "decode", samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "\n"); n != 20 {
		t.Errorf("%d lines, want 20:\n%s", n, out)
	}
	if want := samplePath + ": 20 packets: 19 RoCEv2 (1 with a bad ICRC, 1 cut by the capture), 0 malformed, 1 other\n"; summary != want {
		t.Errorf("summary %q, want %q", summary, want)
	}
	out, _, err = run(t, nil, "decode", "--json", samplePath)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["n"] != float64(i+1) {
			t.Errorf("--json line %d %q: %v", i+1, line, err)
		}
	}
}

// TestDecodeFollowsAPipe feeds `decode -` a capture through a pipe and
// reads the first packet's line before the capture ends, as a live capture
// (tcpdump -U -w - | rbridge decode -) needs.
func TestDecodeFollowsAPipe(t *testing.T) {
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	// The sample's first three blocks: the section header, the interface
	// description and the first packet.
	first := 0
	for range 3 {
		first += int(binary.LittleEndian.Uint32(sample[first+4:]))
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	cmd := newRootCommand()
	cmd.SetIn(inR)
	cmd.SetOut(outW)
	cmd.SetErr(io.Discard)
	cmd.SetArgs([]string{"decode", "-"})
	done := make(chan error, 1)
	go func() {
		err := cmd.Execute()
		outW.Close()
		done <- err
	}()
	if _, err := inW.Write(sample[:first]); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(outR).ReadString('\n')
		line <- s
		io.Copy(io.Discard, outR)
	}()
	select {
	case s := <-line:
		if !strings.Contains(s, "RC_SEND_ONLY") {
			t.Errorf("first line %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first packet is in the pipe, its line not printed after 10 s")
	}
	if _, err := inW.Write(sample[first:]); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Error(err)
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
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		stdin []byte
		args  []string
		want  string
	}{
		{"missing file", nil, []string{"decode", "/nonexistent.pcap"}, "decode /nonexistent.pcap: no such file or directory"},
		{"directory", nil, []string{"decode", dir}, "decode " + dir + ": a directory, not a capture file"},
		{"not a capture", []byte("hello, world"), []string{"decode", "-"}, "not a pcap or pcapng file"},
		{"empty", nil, []string{"decode", "-"}, "empty or truncated"},
		{"no file", nil, []string{"decode"}, "decode takes one capture file (- for standard input), got 0 arguments"},
		{"bad port", nil, []string{"decode", "--port", "0", "-"}, "--port 0: want 1 to 65535"},
		{"pcapng cut in a block", sample[:len(sample)-100], []string{"decode", "-"}, "after packet 18: pcapng: the file ends inside a block"},
		{"pcap cut in a packet", pcapFile[:len(pcapFile)-10], []string{"decode", "-"}, "after packet 37"},
	} {
		_, _, err := run(t, tc.stdin, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	// A capture cut short still gets its summary line, then the error.
	_, summary, err := run(t, sample[:len(sample)-100], "decode", "-")
	if want := "stdin: 18 packets: 18 RoCEv2 (1 with a bad ICRC, 0 cut by the capture), 0 malformed, 0 other\n"; summary != want {
		t.Errorf("cut capture: summary %q, want %q", summary, want)
	}
	if err == nil || !strings.Contains(err.Error(), "decode stdin: after packet 18: pcapng: the file ends inside a block") {
		t.Errorf("cut capture: %v", err)
	}
	// Also when the cut is in the first packet; not when in the file header.
	_, summary, err = run(t, pcapFile[:24+10], "decode", "-")
	if want := "stdin: 0 packets: 0 RoCEv2 (0 with a bad ICRC, 0 cut by the capture), 0 malformed, 0 other\n"; summary != want || err == nil {
		t.Errorf("capture cut in its first packet: summary %q, %v; want %q and an error", summary, err, want)
	}
	if _, summary, err = run(t, pcapFile[:20], "decode", "-"); summary != "" || err == nil {
		t.Errorf("capture cut in its header: summary %q, %v; want none and an error", summary, err)
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, nil, "version")
	if err != nil || !strings.HasPrefix(out, "rbridge ") || len(strings.TrimSpace(out)) <= len("rbridge ") {
		t.Errorf("version: %q, %v", out, err)
	}
}
