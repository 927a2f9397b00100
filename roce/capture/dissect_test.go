package capture_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/capture"
)

var (
	macs    = []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	src4    = netip.MustParseAddrPort("10.0.0.1:49152")
	dst4    = netip.MustParseAddrPort("10.0.0.2:4791")
	src6    = netip.MustParseAddrPort("[fd00::1]:49152")
	dst6    = netip.MustParseAddrPort("[fd00::2]:4791")
	payload = []byte("hello")
)

// transport builds a transport packet (BTH to a zero ICRC).
func transport(op roce.Opcode) []byte {
	f := roce.PacketFields{
		BTH:    roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: 0x12, PSN: 7, AckReq: true},
		RDETH:  roce.RDETHFields{EEC: 0xabcdef},
		XRCETH: roce.XRCETHFields{SRQ: 0x123456},
		DETH:   roce.DETHFields{QKey: 0x11111111, SrcQP: 0x21},
		RETH:   roce.RETHFields{VA: 0x1000, RKey: 0x77, DMALen: 5},
	}
	return roce.AppendPacket(nil, &f, payload)
}

// ipv4 builds an IPv4/UDP packet around tr, to port dport, with the TOS,
// the flags and fragment offset, and options given, and its ICRC. It panics
// where roce.PutICRC fails: a mistake in the test itself.
func ipv4(tos uint8, frag uint16, opts []byte, dport uint16, tr []byte) []byte {
	ihl := 20 + len(opts)
	ip := make([]byte, ihl+8, ihl+8+len(tr))
	ip[0], ip[1] = 0x40|byte(ihl/4), tos
	binary.BigEndian.PutUint16(ip[2:], uint16(ihl+8+len(tr)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8], ip[9] = 64, 17
	a, b := src4.Addr().As4(), dst4.Addr().As4()
	copy(ip[12:], a[:])
	copy(ip[16:], b[:])
	copy(ip[20:], opts)
	u := ip[ihl:]
	binary.BigEndian.PutUint16(u, src4.Port())
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(tr)))
	ip = append(ip, tr...)
	if err := roce.PutICRC(ip); err != nil {
		panic(err)
	}
	return ip
}

// ipv6 builds an IPv6/UDP packet around tr with the traffic class given
// and the extension headers ext (whose first next header is first, UDP
// when ext is empty); the ICRC is computed only without them. It panics
// where roce.PutICRC fails: a mistake in the test itself.
func ipv6(tc uint8, first uint8, ext []byte, tr []byte) []byte {
	ip := make([]byte, 40, 40+len(ext)+8+len(tr))
	binary.BigEndian.PutUint32(ip, 6<<28|uint32(tc)<<20|0x12345)
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ext)+8+len(tr)))
	ip[6], ip[7] = first, 64
	a, b := src6.Addr().As16(), dst6.Addr().As16()
	copy(ip[8:], a[:])
	copy(ip[24:], b[:])
	ip = append(ip, ext...)
	u := make([]byte, 8)
	binary.BigEndian.PutUint16(u, src6.Port())
	binary.BigEndian.PutUint16(u[2:], dst6.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(tr)))
	ip = append(append(ip, u...), tr...)
	if len(ext) == 0 && first == 17 {
		if err := roce.PutICRC(ip); err != nil {
			panic(err)
		}
	}
	return ip
}

// eth puts an Ethernet header with the given VLAN tags (TPID, TCI pairs)
// in front of an IP packet.
func eth(ip []byte, tags ...uint16) []byte {
	b := bytes.Clone(macs)
	for _, t := range tags {
		b = binary.BigEndian.AppendUint16(b, t)
	}
	et := uint16(0x0800)
	if ip[0]>>4 == 6 {
		et = 0x86dd
	}
	return append(binary.BigEndian.AppendUint16(b, et), ip...)
}

// extHdr builds an IPv6 extension header of n bytes (a multiple of 8)
// whose next header is next.
func extHdr(next uint8, n int) []byte {
	h := make([]byte, n)
	h[0], h[1] = next, byte(n/8-1)
	h[2] = 1 // a PadN option filling the rest
	h[3] = byte(n - 4)
	return h
}

// fragHdr builds an IPv6 fragment header.
func fragHdr(next uint8, offset int, more bool, id uint32) []byte {
	fo := uint16(offset)
	if more {
		fo |= 1
	}
	h := []byte{next, 0, byte(fo >> 8), byte(fo)}
	return binary.BigEndian.AppendUint32(h, id)
}

func TestDecodeDissection(t *testing.T) {
	send := transport(roce.RCSendOnly)
	plain4 := eth(ipv4(0x02, 0x4000, nil, roce.Port, send))
	// The first fragment of a datagram of 8+20+... bytes, cut after the
	// BTH; and a later fragment whose bytes look like a UDP header to 4791.
	firstFrag := ipv4(0, 0x2000, nil, roce.Port, send)
	firstFrag = firstFrag[:20+8+12]
	binary.BigEndian.PutUint16(firstFrag[2:], uint16(len(firstFrag)))
	laterFrag := ipv4(0, 185, nil, roce.Port, send)
	hbhDest := append(extHdr(60, 8), extHdr(17, 16)...)
	for _, tc := range []struct {
		name string
		lt   capture.LinkType
		b    []byte
		wire int    // 0: len(b)
		text string // the line after the number and the time
		json string // keys that must be in the JSON object, with these values
	}{
		{
			name: "plain",
			lt:   capture.LinkTypeEthernet, b: plain4,
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0xd699ed90 ok",
			json: `{"roce": true, "ip": {"version": 4, "src": "10.0.0.1", "dst": "10.0.0.2", "dscp": 0, "ecn": 2, "ttl": 64, "proto": 17, "id": 4660, "df": true}}`,
		},
		{
			name: "VLAN 42, priority 3",
			lt:   capture.LinkTypeEthernet, b: eth(ipv4(0x02, 0x4000, nil, roce.Port, send), 0x8100, 3<<13|42),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0xd699ed90 ok vlan=42 pcp=3",
			json: `{"vlan": [{"id": 42, "pcp": 3, "dei": false, "tpid": 33024}]}`,
		},
		{
			name: "QinQ, priority-tagged VLAN 0 inside",
			lt:   capture.LinkTypeEthernet, b: eth(ipv4(0x02, 0x4000, nil, roce.Port, send), 0x88a8, 0x1000|100, 0x8100, 5<<13),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0xd699ed90 ok vlan=100 pcp=0 dei vlan=0 pcp=5",
			json: `{"vlan": [{"id": 100, "pcp": 0, "dei": true, "tpid": 34984}, {"id": 0, "pcp": 5, "dei": false, "tpid": 33024}]}`,
		},
		{
			// TOS is masked from the ICRC: the same ICRC.
			name: "DSCP 26, ECN CE",
			lt:   capture.LinkTypeEthernet, b: eth(ipv4(26<<2|3, 0x4000, nil, roce.Port, send)),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A ECN-CE len=5 pad=3 icrc=0xd699ed90 ok dscp=26",
			json: `{"ip": {"version": 4, "src": "10.0.0.1", "dst": "10.0.0.2", "dscp": 26, "ecn": 3, "ttl": 64, "proto": 17, "id": 4660, "df": true}}`,
		},
		{
			name: "IPv4 options",
			lt:   capture.LinkTypeEthernet, b: eth(ipv4(0x02, 0x4000, []byte{1, 1, 1, 0}, roce.Port, send)),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0x2f6b3dbd ok",
		},
		{
			name: "IPv6, traffic class",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(46<<2|1, 17, nil, send)),
			text: "[fd00::1]:49152 > [fd00::2]:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0x1443cc7d ok dscp=46",
			json: `{"ip": {"version": 6, "src": "fd00::1", "dst": "fd00::2", "dscp": 46, "ecn": 1, "ttl": 64, "proto": 17, "flow_label": 74565}}`,
		},
		{
			name: "IPv6 hop-by-hop and destination options",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(0, 0, hbhDest, send)),
			text: "[fd00::1]:49152 > [fd00::2]:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0x00000000 (ICRC not checked: IPv6 extension headers)",
			json: `{"roce": true, "note": "ICRC not checked: IPv6 extension headers", "ip": {"version": 6, "src": "fd00::1", "dst": "fd00::2", "dscp": 0, "ecn": 0, "ttl": 64, "proto": 17, "flow_label": 74565, "ext_headers": [0, 60]}}`,
		},
		{
			name: "IPv6 atomic fragment",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(0, 44, fragHdr(17, 0, false, 9), send)),
			text: "[fd00::1]:49152 > [fd00::2]:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0x00000000 (ICRC not checked: IPv6 extension headers)",
		},
		{
			name: "IPv6 first fragment",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(0, 44, fragHdr(17, 0, true, 9), send)),
			text: "[fd00::1]:49152 > [fd00::2]:4791 not RoCEv2 (IPv6 fragment (ID 0x9, offset 0, more follow) of a UDP datagram: not reassembled)",
			json: `{"roce": false, "ip": {"version": 6, "src": "fd00::1", "dst": "fd00::2", "dscp": 0, "ecn": 0, "ttl": 64, "proto": 17, "flow_label": 74565, "ext_headers": [44], "frag": {"id": 9, "offset": 0, "more": true}}}`,
		},
		{
			name: "IPv6 later fragment",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(0, 44, fragHdr(17, 1448, false, 9), send)),
			text: "fd00::1 > fd00::2 not RoCEv2 (IPv6 fragment (ID 0x9, offset 1448): not reassembled)",
		},
		{
			name: "IPv6 ESP",
			lt:   capture.LinkTypeEthernet, b: eth(ipv6(0, 50, nil, send)),
			text: "fd00::1 > fd00::2 not RoCEv2 (IPv6 next header 50 (ESP))",
		},
		{
			name: "IPv4 first fragment",
			lt:   capture.LinkTypeEthernet, b: eth(firstFrag),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 not RoCEv2 (IPv4 fragment (ID 0x1234, offset 0, more follow) of a UDP datagram: not reassembled)",
			json: `{"roce": false, "src": "10.0.0.1:49152", "not_roce": "IPv4 fragment (ID 0x1234, offset 0, more follow) of a UDP datagram: not reassembled"}`,
		},
		{
			name: "IPv4 later fragment: no ports invented",
			lt:   capture.LinkTypeEthernet, b: eth(laterFrag),
			text: "10.0.0.1 > 10.0.0.2 not RoCEv2 (IPv4 fragment (ID 0x1234, offset 1480): not reassembled)",
			json: `{"roce": false, "ip": {"version": 4, "src": "10.0.0.1", "dst": "10.0.0.2", "dscp": 0, "ecn": 0, "ttl": 64, "proto": 17, "id": 4660, "df": false, "frag": {"id": 4660, "offset": 1480, "more": false}}}`,
		},
		{
			name: "UDP to another port",
			lt:   capture.LinkTypeEthernet, b: eth(ipv4(0, 0x4000, nil, 53, send)),
			text: "10.0.0.1:49152 > 10.0.0.2:53 not RoCEv2 (UDP port 53, not 4791)",
		},
		{
			name: "raw IP of version 5",
			lt:   capture.LinkTypeRaw, b: []byte{0x50, 0, 0, 20},
			text: "not RoCEv2 (IP version 5)",
		},
		{
			name: "IPv6 on the IPv4 link type",
			lt:   capture.LinkTypeIPv4, b: ipv6(0, 17, nil, send),
			text: "not RoCEv2 (IPv6 where the link layer says IPv4)",
		},
		{
			name: "IPv6 under the IPv4 EtherType",
			lt:   capture.LinkTypeEthernet, b: append(append(bytes.Clone(macs), 0x08, 0x00), ipv6(0, 17, nil, send)...),
			text: "not RoCEv2 (IPv6 where the link layer says IPv4)",
		},
		{
			name: "LLDP",
			lt:   capture.LinkTypeEthernet, b: append(bytes.Clone(macs), 0x88, 0xcc, 2, 7, 4),
			text: "not RoCEv2 (EtherType 0x88cc (LLDP))",
		},
		{
			name: "802.3 with LLC",
			lt:   capture.LinkTypeEthernet, b: append(bytes.Clone(macs), 0, 38, 0x42, 0x42, 3),
			text: "not RoCEv2 (an IEEE 802.3 frame (length 38), no EtherType)",
		},
		{
			name: "cut inside the Ethernet header",
			lt:   capture.LinkTypeEthernet, b: plain4[:10], wire: len(plain4),
			text: "not RoCEv2: the capture kept 10 of the packet's 66 bytes, cutting it inside the Ethernet header",
		},
		{
			// Cut in the source address: no address is invented from
			// the bytes the capture did not keep.
			name: "cut inside the IPv4 header",
			lt:   capture.LinkTypeEthernet, b: plain4[:14+14], wire: len(plain4),
			text: "not RoCEv2: the capture kept 28 of the packet's 66 bytes, cutting it inside the IPv4 header",
			json: `{"roce": false}`,
		},
		{
			name: "cut inside the UDP header",
			lt:   capture.LinkTypeEthernet, b: plain4[:14+20+4], wire: len(plain4),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 CUT: the capture kept 38 of the packet's 66 bytes, cutting it inside the UDP header",
		},
		{
			name: "cut inside the BTH",
			lt:   capture.LinkTypeEthernet, b: plain4[:14+28+6], wire: len(plain4),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 CUT: the capture kept 48 of the packet's 66 bytes, cutting it inside the BTH",
		},
		{
			name: "cut in the payload",
			lt:   capture.LinkTypeEthernet, b: plain4[:14+28+14], wire: len(plain4),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 CUT: the capture kept 56 of the packet's 66 bytes: payload and ICRC not checked",
		},
		{
			name: "IPv4 shorter than its total length",
			lt:   capture.LinkTypeEthernet, b: plain4[:14+28+14],
			text: "10.0.0.1 > 10.0.0.2 not RoCEv2: IPv4 truncated: its total length is 52 bytes, the packet holds 42",
		},
		{
			name: "RD",
			lt:   capture.LinkTypeRaw, b: ipv4(0, 0x4000, nil, roce.Port, transport(0x44)),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RD_SEND_ONLY qp=0x000012 psn=7 A rdeth(eec=0xabcdef) deth(qkey=0x11111111 sqpn=0x000021) len=5 pad=3 icrc=0x0144f42f ok",
			json: `{"opcode": "RD_SEND_ONLY", "opcode_num": 68, "rdeth": {"eec": 11259375}, "deth": {"qkey": 286331153, "sqpn": 33}}`,
		},
		{
			name: "XRC",
			lt:   capture.LinkTypeRaw, b: ipv4(0, 0x4000, nil, roce.Port, transport(0xaa)),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 XRC_RDMA_WRITE_ONLY qp=0x000012 psn=7 A xrceth(srq=0x123456) reth(va=0x1000 rkey=0x77 len=5) len=5 pad=3 icrc=0x3d45dbba ok",
			json: `{"opcode": "XRC_RDMA_WRITE_ONLY", "xrceth": {"srq": 1193046}}`,
		},
		{
			name: "reserved opcode",
			lt:   capture.LinkTypeRaw, b: ipv4(0, 0x4000, nil, roce.Port, func() []byte { b := transport(roce.RCSendOnly); b[0] = 0x56; return b }()),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 MALFORMED: roce: BTH: reserved opcode 0x56",
		},
		{
			name: "RD cut in its DETH",
			lt:   capture.LinkTypeRaw, b: ipv4(0, 0x4000, nil, roce.Port, transport(0x44))[:28+12+4+3], wire: 28 + 12 + 12 + 8 + 4,
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RD_SEND_ONLY qp=0x000012 psn=7 A pad=3 CUT: the capture kept 47 of the packet's 64 bytes, cutting it inside the DETH",
		},
		{
			name: "Linux cooked with a VLAN tag",
			lt:   capture.LinkTypeLinuxSLL,
			b:    append([]byte{0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x81, 0x00, 0x60, 0x07, 0x08, 0x00}, ipv4(0x02, 0x4000, nil, roce.Port, send)...),
			text: "10.0.0.1:49152 > 10.0.0.2:4791 RC_SEND_ONLY qp=0x000012 psn=7 A len=5 pad=3 icrc=0xd699ed90 ok vlan=7 pcp=3 host",
			json: `{"cooked": {"arphrd": 1, "pkttype": "host"}}`,
		},
	} {
		wire := tc.wire
		if wire == 0 {
			wire = len(tc.b)
		}
		rec := capture.Decode(1, capture.Packet{Data: tc.b, Length: wire, Time: time.Unix(0, 5000).UTC(), LinkType: tc.lt})
		if got, want := rec.Text(), "    1 00:00:00.000005 "+tc.text; got != want {
			t.Errorf("%s: text (-want +got):\n%s", tc.name, cmp.Diff(want, got))
		}
		if tc.json == "" {
			continue
		}
		var want, got map[string]any
		if err := json.Unmarshal([]byte(tc.json), &want); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				delete(got, k)
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: JSON keys (-want +got):\n%s\nin %s", tc.name, diff, b)
		}
	}
}

// TestDecodeEveryPrefix decodes every prefix of a few frames as cut by a
// snap length and as short on the wire: never a panic, never an address or
// a port that is not in the captured bytes.
func TestDecodeEveryPrefix(t *testing.T) {
	frames := [][]byte{
		eth(ipv4(0x02, 0x4000, []byte{1, 1, 1, 0}, roce.Port, transport(roce.RCRDMAWriteOnly)), 0x8100, 42),
		eth(ipv6(0, 0, append(extHdr(44, 8), fragHdr(17, 0, false, 1)...), transport(0x53))),
		append([]byte{0x86, 0xdd, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0}, ipv6(0, 17, nil, transport(roce.UDSendOnly))...),
	}
	lts := []capture.LinkType{capture.LinkTypeEthernet, capture.LinkTypeEthernet, capture.LinkTypeLinuxSLL2}
	for i, f := range frames {
		for n := range len(f) {
			for _, wire := range []int{len(f), n} {
				rec := capture.Decode(1, capture.Packet{Data: bytes.Clone(f[:n]), Length: wire, LinkType: lts[i]})
				if rec.Error == "" && rec.NotRoCE == "" {
					t.Errorf("frame %d cut at %d (wire %d): no error: %s", i, n, wire, rec.Text())
				}
				if wire > n && rec.Error != "" && !rec.Cut() && !strings.Contains(rec.Error, "truncated") {
					t.Errorf("frame %d cut at %d: not marked cut: %s", i, n, rec.Text())
				}
				if ip := rec.IP; ip != nil {
					want := [2]string{"10.0.0.1", "10.0.0.2"}
					if ip.Version == 6 {
						want = [2]string{"fd00::1", "fd00::2"}
					}
					if [2]string{ip.Src, ip.Dst} != want {
						t.Errorf("frame %d cut at %d: IP addresses %s, %s", i, n, ip.Src, ip.Dst)
					}
				}
				if rec.Src != "" && !strings.HasSuffix(rec.Src, ":49152") {
					t.Errorf("frame %d cut at %d: source %s", i, n, rec.Src)
				}
			}
		}
	}
}

func FuzzDecode(f *testing.F) {
	send := transport(roce.RCSendOnly)
	for _, b := range [][]byte{
		eth(ipv4(0x02, 0x4000, nil, roce.Port, send), 0x8100, 42),
		eth(ipv6(0, 0, append(extHdr(60, 8), extHdr(17, 8)...), send)),
		eth(ipv4(0, 0x4000, nil, roce.Port, transport(0xa4))),
	} {
		f.Add(uint32(1), b, 0)
		f.Add(uint32(276), append([]byte{0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0}, b[14:]...), 10)
	}
	f.Fuzz(func(t *testing.T, lt uint32, b []byte, more int) {
		wire := len(b) + max(0, min(more, 1<<16))
		rec := capture.Decode(1, capture.Packet{Data: b, Length: wire, LinkType: capture.LinkType(lt)})
		_ = rec.Text()
		if _, err := json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
	})
}
