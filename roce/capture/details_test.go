package capture_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

// dumpBytes decodes a capture held in memory.
func dumpBytes(t *testing.T, file []byte, o capture.DumpOptions) (string, capture.Stats) {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	st, err := capture.DumpWith(&out, r, o)
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), st
}

// TestStatsPartition: every packet counts once as RoCEv2, malformed or
// other; a 2-byte payload to port 4791 is malformed, not RoCEv2; and one
// packet is "1 packet".
func TestStatsPartition(t *testing.T) {
	ip := ipv4(0, 0, nil, roce.Port, transport(roce.RCSendOnly))[:20+8+2] // cut to 2 bytes of UDP payload
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[24:], 8+2)
	short := eth(ip)
	_, st := dumpBytes(t, pcapFile(le, false, 0, 1, pcapRec{data: short}), capture.DumpOptions{})
	if want := (capture.Stats{Packets: 1, Malformed: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got, want := st.String(), "1 packet: 0 RoCEv2 (0 with a bad ICRC, 0 cut by the capture), 1 malformed, 0 other"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// TestDecodePort: --port decodes RoCEv2 on another UDP port (a demo's),
// which is otherwise not RoCEv2.
func TestDecodePort(t *testing.T) {
	file := pcapFile(le, false, 0, 1, pcapRec{data: eth(ipv4(0, 0, nil, 5000, transport(roce.RCSendOnly)))})
	out, st := dumpBytes(t, file, capture.DumpOptions{})
	if st.Other != 1 || !strings.Contains(out, "UDP port 5000, not 4791") {
		t.Errorf("on 4791: %+v\n%s", st, out)
	}
	out, st = dumpBytes(t, file, capture.DumpOptions{Port: 5000})
	if st.RoCE != 1 || !strings.Contains(out, "RC_SEND_ONLY") {
		t.Errorf("with port 5000: %+v\n%s", st, out)
	}
}

// TestCaptureLengthNotes: a record whose captured length is above the
// snap length, or whose original length is below its captured one, is read
// as captured and says so.
func TestCaptureLengthNotes(t *testing.T) {
	frame := eth(ipv4(0, 0, nil, roce.Port, transport(roce.RCSendOnly)))
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"pcap above the snap length", pcapFile(le, false, 60, 1, pcapRec{data: frame}), "above its snap length of 60"},
		{"pcap original below captured", pcapFile(le, false, 0, 1, pcapRec{data: frame, origLen: 10}), "original length 10 is below"},
		{"pcapng above the snap length", cat(ngSHB(le), ngIDB(le, 1, 60), ngEPB(le, 0, 1, frame, uint32(len(frame)))), "above its snap length of 60"},
		{"pcapng original below captured", cat(ngSHB(le), ngIDB(le, 1, 0), ngEPB(le, 0, 1, frame, 10)), "original length 10 is below"},
	} {
		text, st := dumpBytes(t, tc.file, capture.DumpOptions{})
		js, _ := dumpBytes(t, tc.file, capture.DumpOptions{Format: capture.JSON})
		if st.RoCE != 1 || !strings.Contains(text, "(capture: ") || !strings.Contains(text, tc.want) || !strings.Contains(js, `"capture":`) {
			t.Errorf("%s: %+v\n%s%s", tc.name, st, text, js)
		}
	}
	// A record that adds up says nothing.
	if text, _ := dumpBytes(t, pcapFile(le, false, 65535, 1, pcapRec{data: frame}), capture.DumpOptions{}); strings.Contains(text, "capture:") {
		t.Errorf("a sound record: %s", text)
	}
}

// TestDecodeInterface: a pcapng capture of several interfaces names each
// packet's; one of a single interface does not.
func TestDecodeInterface(t *testing.T) {
	frame := eth(ipv4(0, 0, nil, roce.Port, transport(roce.RCSendOnly)))
	two := cat(ngSHB(le), ngIDB(le, 1, 0), ngIDB(le, 1, 0), ngEPB(le, 0, 1, frame, 0), ngEPB(le, 1, 2, frame, 0))
	text, _ := dumpBytes(t, two, capture.DumpOptions{})
	js, _ := dumpBytes(t, two, capture.DumpOptions{Format: capture.JSON})
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], " if=0") || !strings.Contains(lines[1], " if=1") || !strings.Contains(js, `"interface":1`) {
		t.Errorf("two interfaces:\n%s%s", text, js)
	}
	one := cat(ngSHB(le), ngIDB(le, 1, 0), ngEPB(le, 0, 1, frame, 0))
	if text, _ := dumpBytes(t, one, capture.DumpOptions{}); strings.Contains(text, "if=") {
		t.Errorf("one interface: %s", text)
	}
}
