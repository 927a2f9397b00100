package capture_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/gopacket/pcapgo"

	"github.com/rbridge/rbridge/roce/capture"
)

// readAll reads every packet of b, copying their data.
func readAll(t *testing.T, b []byte) ([]capture.Packet, error) {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var ps []capture.Packet
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return ps, nil
		}
		if err != nil {
			return ps, err
		}
		p.Data = bytes.Clone(p.Data)
		ps = append(ps, p)
	}
}

func TestReaderPcap(t *testing.T) {
	a, b := []byte{1, 2, 3, 4, 5}, []byte{6, 7, 8}
	for _, tc := range []struct {
		name string
		file []byte
		want []capture.Packet
	}{
		{
			"little-endian µs",
			pcapFile(le, false, 65535, 1, pcapRec{sec: 10, frac: 7, data: a}, pcapRec{sec: 11, frac: 999999, data: b, origLen: 60}),
			[]capture.Packet{
				{Data: a, Length: 5, Time: utc(10, 7000), LinkType: capture.LinkTypeEthernet},
				{Data: b, Length: 60, Time: utc(11, 999999000), LinkType: capture.LinkTypeEthernet},
			},
		},
		{
			"big-endian ns",
			pcapFile(be, true, 65535, 101, pcapRec{sec: 10, frac: 7, data: a}),
			[]capture.Packet{{Data: a, Length: 5, Time: utc(10, 7), LinkType: capture.LinkTypeRaw}},
		},
		{
			// libpcap and tshark read a snap length of 0 as "no limit".
			"snap length 0",
			pcapFile(le, false, 0, 1, pcapRec{sec: 1, data: a}),
			[]capture.Packet{{Data: a, Length: 5, Time: utc(1, 0), LinkType: capture.LinkTypeEthernet}},
		},
		{
			"Linux cooked v2, a link type above 255",
			pcapFile(le, false, 65535, 276, pcapRec{sec: 1, data: a}),
			[]capture.Packet{{Data: a, Length: 5, Time: utc(1, 0), LinkType: capture.LinkTypeLinuxSLL2}},
		},
		{
			"257 is not Ethernet",
			pcapFile(be, false, 65535, 257, pcapRec{sec: 1, data: a}),
			[]capture.Packet{{Data: a, Length: 5, Time: utc(1, 0), LinkType: 257}},
		},
		{
			"FCS bits above the link type",
			pcapFile(le, false, 65535, 0x14000001, pcapRec{sec: 1, data: a}),
			[]capture.Packet{{Data: a, Length: 5, Time: utc(1, 0), LinkType: capture.LinkTypeEthernet}},
		},
		{"no packets", pcapFile(le, false, 65535, 1), nil},
	} {
		got, err := readAll(t, tc.file)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: packets (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestReaderPcapng(t *testing.T) {
	a, b := []byte{1, 2, 3, 4, 5}, []byte{6, 7, 8}
	for _, order := range []struct {
		name string
		o    byteOrder
	}{{"little-endian", le}, {"big-endian", be}} {
		o := order.o
		tsoff := o.AppendUint64(nil, 100)
		file := cat(
			ngSHB(o),
			// Interface 0: Ethernet, default microseconds. Interface 1:
			// Linux cooked v2 in nanoseconds, 100 s offset. Interface 2:
			// raw IP in units of 2^-20 s.
			ngIDB(o, 1, 0),
			ngIDB(o, 276, 262144, ngOpt(o, 9, []byte{9}), ngOpt(o, 14, tsoff)),
			ngBlock(o, 4, o.AppendUint32(nil, 0)), // a name resolution block, skipped
			ngIDB(o, 101, 65535, ngOpt(o, 9, []byte{0x80 | 20})),
			ngEPB(o, 0, 1_500_000, a, 0),
			ngEPB(o, 1, 2_000_000_007, b, 70),
			ngEPB(o, 2, 3<<20|1<<19, a, 0),
			ngPB(o, 0, 4_000_001, b),
			ngSPB(o, a, 5),
			// A new section: its interfaces replace the first section's.
			ngSHB(be),
			ngIDB(be, 228, 0),
			ngEPB(be, 0, 6_000_000, b, 0),
		)
		want := []capture.Packet{
			{Data: a, Length: 5, Time: utc(1, 500_000_000), LinkType: capture.LinkTypeEthernet, Interfaces: 3},
			{Data: b, Length: 70, Time: utc(102, 7), LinkType: capture.LinkTypeLinuxSLL2, Interface: 1, Interfaces: 3},
			{Data: a, Length: 5, Time: utc(3, 500_000_000), LinkType: capture.LinkTypeRaw, Interface: 2, Interfaces: 3},
			{Data: b, Length: 3, Time: utc(4, 1000), LinkType: capture.LinkTypeEthernet, Interfaces: 3},
			{Data: a, Length: 5, LinkType: capture.LinkTypeEthernet, Interfaces: 3}, // no timestamp
			{Data: b, Length: 3, Time: utc(6, 0), LinkType: capture.LinkTypeIPv4, Interfaces: 1},
		}
		got, err := readAll(t, file)
		if err != nil {
			t.Errorf("%s: %v", order.name, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: packets (-want +got):\n%s", order.name, diff)
		}
	}
}

// TestReaderMatchesPcapgo reads the committed captures with Reader and with
// gopacket's pcapgo, which the decoder used before: every packet the same.
func TestReaderMatchesPcapgo(t *testing.T) {
	for _, path := range []string{samplePath, "../testdata/scapy.pcap", "../testdata/rbridge.pcap"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := readAll(t, b)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var want []capture.Packet
		if strings.HasSuffix(path, ".pcapng") {
			r, err := pcapgo.NewNgReader(bytes.NewReader(b), pcapgo.DefaultNgReaderOptions)
			if err != nil {
				t.Fatal(err)
			}
			for {
				data, ci, err := r.ReadPacketData()
				if err != nil {
					break
				}
				want = append(want, capture.Packet{Data: data, Length: ci.Length, Time: ci.Timestamp.UTC(), LinkType: capture.LinkTypeEthernet})
			}
		} else {
			r, err := pcapgo.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			for {
				data, ci, err := r.ReadPacketData()
				if err != nil {
					break
				}
				want = append(want, capture.Packet{Data: data, Length: ci.Length, Time: ci.Timestamp, LinkType: capture.LinkTypeEthernet})
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: pcapgo read no packets", path)
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(capture.Packet{}, "Interfaces")); diff != "" {
			t.Errorf("%s: (-pcapgo +Reader):\n%s", path, diff)
		}
	}
}

func TestReaderGzip(t *testing.T) {
	file := pcapFile(le, false, 65535, 1, pcapRec{sec: 1, data: []byte{1, 2, 3}})
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(file); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, z.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []capture.Packet{{Data: []byte{1, 2, 3}, Length: 3, Time: utc(1, 0), LinkType: capture.LinkTypeEthernet}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packets (-want +got):\n%s", diff)
	}
}

func TestReaderErrors(t *testing.T) {
	a := []byte{1, 2, 3, 4}
	badVersion := pcapFile(le, false, 65535, 1)
	badVersion[4] = 3
	hugePacket := pcapFile(le, false, 65535, 1, pcapRec{data: a})
	le.PutUint32(hugePacket[24+8:], 1<<30)
	badTrailer := cat(ngSHB(le), ngIDB(le, 1, 0), ngEPB(le, 0, 0, a, 0))
	badTrailer[len(badTrailer)-1] = 0x7f
	badLen := cat(ngSHB(le), ngIDB(le, 1, 0), ngEPB(le, 0, 0, a, 0))
	le.PutUint32(badLen[28+20+4:], 13)
	overLong := cat(ngSHB(le), ngIDB(le, 1, 0), ngEPB(le, 0, 0, a, 0))
	le.PutUint32(overLong[28+20+8+12:], 99) // captured length beyond the block
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "reading the file header: 0 bytes (an empty or truncated file?)"},
		{"three bytes", []byte{0xd4, 0xc3, 0xb2}, "reading the file header: 3 bytes (an empty or truncated file?)"},
		{"not a capture", []byte("hello, world"), "not a pcap or pcapng file (magic 68656c6c)"},
		{"pcap header cut", pcapFile(le, false, 65535, 1)[:20], "pcap: the file ends inside its 24-byte header, after 20 bytes"},
		{"pcap version", badVersion, "pcap: version 3.4 is not supported"},
		{"pcap packet claims 1 GiB", hugePacket, "pcap: a packet claims 1073741824 captured bytes"},
		{"pcapng trailing length", badTrailer, "pcapng: block of type 0x6: its trailing length 2130706468 differs from its length 36"},
		{"pcapng block length", badLen, "pcapng: block of type 0x6 has a bad length 13"},
		{"pcapng captured length", overLong, "pcapng: a packet block claims 99 captured bytes and holds 4"},
		{"pcapng packet before any interface", cat(ngSHB(le), ngEPB(le, 0, 0, a, 0)), "pcapng: a packet on interface 0, but the section describes 0 interfaces"},
		{"pcapng simple packet before any interface", cat(ngSHB(le), ngSPB(le, a, 4)), "pcapng: a simple packet block, but the section describes no interface"},
		{"gzip's magic, not gzip", []byte("\x1f\x8bnot gzip"), "starts with gzip's magic number (1f 8b) but its gzip header is not valid (gzip: invalid header)"},
		{"gzip header cut", []byte{0x1f, 0x8b}, "reading its gzip header: unexpected EOF"},
	} {
		_, err := readAll(t, tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "gzip: gzip:") {
			t.Errorf("%s: %v: the prefix doubled", tc.name, err)
		}
	}
}

// TestReaderCutEveryPrefix cuts captures at every length: the reader
// reports a clean end only where a packet or a block ends, an error
// everywhere else, and never panics.
func TestReaderCutEveryPrefix(t *testing.T) {
	a := bytes.Repeat([]byte{0xab}, 21)
	pcapRecs := []pcapRec{{sec: 1, data: a}, {sec: 2, data: a[:7]}}
	pcap := pcapFile(le, false, 65535, 1, pcapRecs...)
	pcapEnds := map[int]int{24: 0, 24 + 16 + 21: 1, len(pcap): 2}
	blocks := [][]byte{ngSHB(be), ngIDB(be, 1, 0, ngOpt(be, 9, []byte{9})), ngEPB(be, 0, 5, a, 0), ngBlock(be, 5, make([]byte, 8)), ngEPB(be, 0, 6, a[:3], 0)}
	ng := cat(blocks...)
	ngEnds := map[int]int{}
	n, packets := 0, []int{0, 0, 1, 1, 2}
	for i, b := range blocks {
		n += len(b)
		ngEnds[n] = packets[i]
	}
	for _, tc := range []struct {
		name string
		file []byte
		ends map[int]int // prefix length -> whole packets in it
	}{{"pcap", pcap, pcapEnds}, {"pcapng", ng, ngEnds}} {
		for i := range len(tc.file) + 1 {
			got, err := readAll(t, tc.file[:i])
			want, clean := tc.ends[i]
			switch {
			case clean && err != nil:
				t.Errorf("%s cut at %d (a packet boundary): %v", tc.name, i, err)
			case clean && len(got) != want:
				t.Errorf("%s cut at %d: %d packets, want %d", tc.name, i, len(got), want)
			case !clean && err == nil:
				t.Errorf("%s cut at %d: no error, %d packets", tc.name, i, len(got))
			}
		}
	}
}

func FuzzReader(f *testing.F) {
	for _, path := range []string{samplePath, "../testdata/scapy.pcap"} {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:min(len(b), 600)])
	}
	f.Add(cat(ngSHB(be), ngIDB(be, 276, 0, ngOpt(be, 9, []byte{0x80 | 30})), ngEPB(be, 0, 1<<40, []byte{1, 2}, 9), ngSPB(be, []byte{3}, 1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := capture.NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		for range 1000 {
			p, err := r.Next()
			if err != nil {
				return
			}
			if p.Length < len(p.Data) {
				t.Fatalf("packet of %d bytes captured, %d on the wire", len(p.Data), p.Length)
			}
		}
	})
}

// TestReaderReadError passes on a read error other than the end of the
// input as it is, not as an empty file.
func TestReaderReadError(t *testing.T) {
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	_, err = capture.NewReader(dir)
	if err == nil || !strings.Contains(err.Error(), "is a directory") || strings.Contains(err.Error(), "empty") {
		t.Errorf("reading a directory: %v", err)
	}
}
