package gateway_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

// roceTally counts the RoCEv2 packets (UDP 4791) seen on one of the
// guest's interfaces, by opcode, and keeps the invalidated rkeys of the
// SEND_WITH_INV packets and the rkeys of READ requests in order: a guest
// test that fails in the protocol shows with it what crossed each fabric.
type roceTally struct {
	mu      sync.Mutex
	ops     map[string]int
	invKeys []uint32
	naks    []string
}

// packetSocket opens an AF_PACKET socket on ifname that takes every
// frame the interface sends and receives, and whose reads give up after
// 200 ms (so its reader sees a stop); what names the caller in failures.
func packetSocket(tb testing.TB, what, ifname string) int {
	tb.Helper()
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		tb.Fatalf("%s on %s: %v", what, ifname, err)
	}
	proto := uint16(unix.ETH_P_ALL)
	proto = proto<<8 | proto>>8 // network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(proto))
	if err != nil {
		tb.Fatalf("%s on %s: %v", what, ifname, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		tb.Fatalf("%s on %s: %v", what, ifname, err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000})
	return fd
}

// readRoCE reads fd (packetSocket) into b on a goroutine of its own until
// tb ends, handing each IPv4 RoCEv2 frame (UDP to port 4791) to each, with
// the length of its Ethernet, IP and UDP headers; the socket is closed
// once the goroutine returned.
func readRoCE(tb testing.TB, fd int, b []byte, each func(frame []byte, hdr int)) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, b, 0)
			if err != nil || n < 14+20+8 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != 17 {
				continue
			}
			ihl := int(b[14]&0xf) * 4
			hdr := 14 + ihl + 8
			if hdr > n || binary.BigEndian.Uint16(b[14+ihl+2:]) != roce.Port {
				continue
			}
			each(b[:n], hdr)
		}
	}()
	tb.Cleanup(func() {
		close(stop)
		<-done
		unix.Close(fd)
	})
}

// tallyRoCE starts a tally on ifname until the test ends.
func tallyRoCE(t *testing.T, ifname string) *roceTally {
	t.Helper()
	fd := packetSocket(t, "tally", ifname)
	r := &roceTally{ops: map[string]int{}}
	var p roce.Packet
	readRoCE(t, fd, make([]byte, 65536), func(frame []byte, hdr int) {
		if p.Decode(frame[hdr:]) != nil {
			return
		}
		r.mu.Lock()
		op := p.Opcode()
		r.ops[op.String()]++
		if p.IETH != nil && len(r.invKeys) < 4096 {
			r.invKeys = append(r.invKeys, p.IETH.RKey())
		}
		if p.AETH != nil && op == roce.RCAcknowledge && len(r.naks) < 64 {
			if syn := p.AETH.Syndrome(); syn.Type() != roce.AckTypeACK {
				r.naks = append(r.naks, fmt.Sprintf("%v psn %d", syn, p.BTH.PSN()))
			}
		}
		r.mu.Unlock()
	})
	return r
}

// String says what was counted.
func (r *roceTally) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for k := range r.ops {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "  %s %d\n", k, r.ops[k])
	}
	fmt.Fprintf(&b, "  invalidated rkeys (%d): %x\n", len(r.invKeys), r.invKeys[:min(len(r.invKeys), 40)])
	fmt.Fprintf(&b, "  NAKs: %v\n", r.naks)
	return b.String()
}

// packetRing keeps the last packets of RoCEv2 (UDP 4791) seen on one of
// the guest's interfaces, their first ringSnap bytes each (the ring holds
// packets as the wire carries them, see ringPackets): what a stall
// the storage benchmarks catch (benchGateway.watch) was preceded by, kept
// as a pcap that `rbridge decode` reads.
type packetRing struct {
	mu   sync.Mutex
	recs []ringRecord
	next int // where the next record goes; recs is full once it wraps
	full bool
}

type ringRecord struct {
	at   time.Time
	orig int
	data []byte
}

// ringSnap is how much of each packet a packetRing keeps: Ethernet, IPv4,
// UDP and every RoCEv2 header before the payload (BTH, RETH, AETH, IETH),
// and the payload's first 90 bytes or more: a storage protocol's command
// or response header (iSER's 28 and iSCSI's 48, NVMe's 64-byte command).
const ringSnap = 160

// ringPackets starts a ring of n packets on ifname until tb ends. The
// sender's UDP segmentation offload shows here as one packet of several
// (AF_PACKET sees the socket buffer before it is cut): each is split into
// the packets the wire carries, given the path's RoCE MTU (gsoSegments).
func ringPackets(tb testing.TB, ifname string, n, mtu int) *packetRing {
	tb.Helper()
	fd := packetSocket(tb, "packet ring", ifname)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	r := &packetRing{recs: make([]ringRecord, n)}
	for i := range r.recs {
		r.recs[i].data = make([]byte, 0, ringSnap)
	}
	readRoCE(tb, fd, make([]byte, 65536+256), func(frame []byte, hdr int) {
		at := time.Now()
		r.mu.Lock()
		for _, seg := range gsoSegments(frame[hdr:], mtu) {
			rec := &r.recs[r.next]
			rec.at, rec.orig = at, hdr+len(seg)
			rec.data = append(append(rec.data[:0], frame[:hdr]...), seg[:min(len(seg), ringSnap-hdr)]...)
			binary.BigEndian.PutUint16(rec.data[14+2:], uint16(hdr-14+len(seg))) // IPv4 total length
			binary.BigEndian.PutUint16(rec.data[hdr-4:], uint16(8+len(seg)))     // UDP length
			r.next++
			if r.next == len(r.recs) {
				r.next, r.full = 0, true
			}
		}
		r.mu.Unlock()
	})
	return r
}

// gsoSegments cuts a UDP payload that may hold several RoCEv2 packets,
// as a sender's UDP segmentation offload packs them (rbridge's userspace
// leg packs a message's packets: each as long as the first but the last),
// into those packets, given the path's MTU: a first packet that carries
// a FIRST or MIDDLE opcode is its headers, mtu bytes and the ICRC long,
// one without payload (an ACK, a READ request) its headers and the ICRC.
// Anything else is one packet.
func gsoSegments(p []byte, mtu int) [][]byte {
	if len(p) < roce.BTHLen {
		return [][]byte{p}
	}
	op := roce.Opcode(p[0])
	pos := op.Position()
	size := roce.BTHLen + op.HeaderLen() + mtu + roce.ICRCLen
	switch {
	case op.Known() && !op.HasPayload(): // ACKs, READ requests: one size
		size = roce.BTHLen + op.HeaderLen() + roce.ICRCLen
	case !op.Known() || (pos != roce.PositionFirst && pos != roce.PositionMiddle):
		return [][]byte{p}
	}
	var out [][]byte
	for len(p) > size {
		out = append(out, p[:size])
		p = p[size:]
	}
	return append(out, p)
}

// pcap returns the ring's packets, oldest first, as a pcap file (Ethernet,
// microseconds).
func (r *packetRing) pcap() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := binary.LittleEndian.AppendUint32(nil, 0xa1b2c3d4)
	out = binary.LittleEndian.AppendUint16(out, 2)
	out = binary.LittleEndian.AppendUint16(out, 4)
	out = binary.LittleEndian.AppendUint64(out, 0) // thiszone, sigfigs
	out = binary.LittleEndian.AppendUint32(out, ringSnap)
	out = binary.LittleEndian.AppendUint32(out, 1) // LINKTYPE_ETHERNET
	add := func(rec ringRecord) {
		out = binary.LittleEndian.AppendUint32(out, uint32(rec.at.Unix()))
		out = binary.LittleEndian.AppendUint32(out, uint32(rec.at.Nanosecond()/1000))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(rec.data)))
		out = binary.LittleEndian.AppendUint32(out, uint32(rec.orig))
		out = append(out, rec.data...)
	}
	if r.full {
		for _, rec := range r.recs[r.next:] {
			add(rec)
		}
	}
	for _, rec := range r.recs[:r.next] {
		add(rec)
	}
	return out
}

// TestPacketRingPcap: a ring that wrapped gives its packets oldest first,
// as a pcap the capture reader takes, with the lengths on the wire kept.
func TestPacketRingPcap(t *testing.T) {
	r := &packetRing{recs: make([]ringRecord, 3)}
	t0 := time.Unix(1700000000, 5000)
	for i := range 5 { // wraps: 3 and 4 replace 0 and 1
		rec := &r.recs[r.next]
		rec.at, rec.orig = t0.Add(time.Duration(i)*time.Millisecond), 1000+i
		rec.data = append(rec.data[:0], bytes.Repeat([]byte{byte(i)}, ringSnap)...)
		r.next++
		if r.next == len(r.recs) {
			r.next, r.full = 0, true
		}
	}
	rd, err := capture.NewReader(bytes.NewReader(r.pcap()))
	if err != nil {
		t.Fatal(err)
	}
	for want := 2; want < 5; want++ {
		p, err := rd.Next()
		if err != nil {
			t.Fatalf("packet %d: %v", want, err)
		}
		if len(p.Data) != ringSnap || p.Data[0] != byte(want) || p.Length != 1000+want || p.Note != "" ||
			!p.Time.Equal(t0.Add(time.Duration(want)*time.Millisecond)) {
			t.Errorf("packet %d: %d bytes of %d, first %d, at %v, note %q", want, len(p.Data), p.Length, p.Data[0], p.Time, p.Note)
		}
	}
	if p, err := rd.Next(); err != io.EOF {
		t.Errorf("after the ring's 3 packets: %v, %v; want EOF", p, err)
	}
}

// TestGSOSegments: a UDP payload packed by segmentation offload is cut
// where the wire cuts it, the last packet shorter; a payload of one
// packet, or one that starts with an ONLY or LAST opcode, stays whole.
func TestGSOSegments(t *testing.T) {
	const mtu = 256
	pkt := func(op roce.Opcode, payload int) []byte {
		b := make([]byte, roce.BTHLen+op.HeaderLen()+payload+roce.ICRCLen)
		b[0] = byte(op)
		return b
	}
	cat := func(ps ...[]byte) []byte { return bytes.Join(ps, nil) }
	for _, c := range []struct {
		name string
		in   []byte
		want []int // lengths
	}{
		{"first+middle", cat(pkt(roce.RCRDMAWriteFirst, mtu), pkt(roce.RCRDMAWriteMiddle, mtu)), []int{roce.BTHLen + 16 + mtu + 4, roce.BTHLen + mtu + 4}},
		{"middle+middle+last", cat(pkt(roce.RCSendMiddle, mtu), pkt(roce.RCSendMiddle, mtu), pkt(roce.RCSendLast, 10)), []int{roce.BTHLen + mtu + 4, roce.BTHLen + mtu + 4, roce.BTHLen + 10 + 4}},
		{"first alone", pkt(roce.RCSendFirst, mtu), []int{roce.BTHLen + mtu + 4}},
		{"only", pkt(roce.RCSendOnly, 76), []int{roce.BTHLen + 76 + 4}},
		{"short", []byte{1, 2}, []int{2}},
		{"acks", cat(pkt(roce.RCAcknowledge, 0), pkt(roce.RCAcknowledge, 0), pkt(roce.RCAcknowledge, 0)), []int{20, 20, 20}},
	} {
		var got []int
		for _, s := range gsoSegments(c.in, mtu) {
			got = append(got, len(s))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: segments of %v bytes, want %v", c.name, got, c.want)
		}
	}
}

// TestPacketRingLoopback: a ring on lo keeps RoCEv2 datagrams sent to
// port 4791 and nothing else, cutting a datagram that packs three ACKs
// into the three packets, each with the lengths of one.
func TestPacketRingLoopback(t *testing.T) {
	needs.Root(t, "an AF_PACKET socket")
	r := ringPackets(t, "lo", 64, 1024)
	ack := make([]byte, roce.BTHLen+roce.AETHLen+roce.ICRCLen)
	ack[0] = byte(roce.RCAcknowledge)
	cnp := make([]byte, roce.CNPLen)
	if err := roce.EncodeCNP(cnp, 7); err != nil {
		t.Fatal(err)
	}
	send := func(port int, payload []byte) {
		t.Helper()
		c, err := net.Dial("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(payload); err != nil {
			t.Fatal(err)
		}
	}
	send(roce.Port+1, cnp) // not RoCEv2's port: not kept
	send(roce.Port, bytes.Repeat(ack, 3))
	send(roce.Port, cnp)
	var acks, cnps int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		acks, cnps = 0, 0
		rd, err := capture.NewReader(bytes.NewReader(r.pcap()))
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := rd.Next()
			if err != nil {
				break
			}
			udp := p.Data[14+20+8:]
			switch {
			case roce.Opcode(udp[0]) == roce.RCAcknowledge && p.Length == 14+20+8+len(ack):
				acks++
			case roce.Opcode(udp[0]) == roce.CNP && p.Length == 14+20+8+len(cnp):
				cnps++
			default:
				t.Fatalf("the ring kept a packet it should not have: opcode %#x, %d bytes", udp[0], p.Length)
			}
		}
		// lo shows each datagram twice (out and in).
		if acks >= 3 && cnps >= 1 || time.Now().After(deadline) {
			break
		}
	}
	if acks%3 != 0 || acks == 0 || cnps == 0 {
		t.Errorf("the ring kept %d ACKs and %d CNPs: want the three ACKs (a multiple of 3, lo shows each datagram twice) and the CNP sent to port 4791", acks, cnps)
	}
}
