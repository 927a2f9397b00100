package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/roce"
)

func newDecodeCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "decode [--json] FILE",
		Short: "Decode the RoCEv2 packets in a pcap or pcapng capture",
		Long: `decode reads a capture (pcap or pcapng; Ethernet, raw IP or Linux cooked
link types) and prints every packet: the BTH, the extension headers its
opcode carries, the payload length, and whether the ICRC is right. Packets
that are not RoCEv2 (UDP to port 4791) are listed as such; malformed ones say
what is wrong. FILE "-" reads standard input.

With --json, one JSON object per packet per line, with the keys
n, roce, src, dst, opcode, opcode_num, se, migreq, pad, pkey, fecn, becn,
dqpn, ackreq, psn, payload_len, icrc, icrc_ok, and where present reth{va,rkey,
dma_len}, aeth{syndrome,msn}, imm, ieth{rkey}, deth{qkey,sqpn},
atomic_eth{va,rkey,swap_add,compare}, atomic_ack_eth{orig}, and error.
icrc is the CRC-32 value; on the wire it is stored little-endian, so
Wireshark, which shows the four bytes in wire order, prints it byte-swapped.

A summary goes to standard error. The exit status is 0 when the capture was
read to the end, whatever its packets held.`,
		Example: `  rbridge decode testdata/sample.pcapng
  rbridge decode --json capture.pcap | jq 'select(.opcode == "RC_RDMA_READ_REQUEST")'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, name, err := openInput(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			defer in.Close()
			out := bufio.NewWriter(cmd.OutOrStdout())
			st, err := decodeCapture(in, out, jsonOut)
			if ferr := out.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return fmt.Errorf("decode %s: %w", name, err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d packets: %d RoCEv2, %d other, %d malformed, %d bad ICRC, %d cut by the capture\n",
				name, st.packets, st.roce, st.other, st.malformed, st.badICRC, st.cut)
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "one JSON object per packet per line")
	return cmd
}

func openInput(path string, stdin io.Reader) (io.ReadCloser, string, error) {
	if path == "-" {
		return io.NopCloser(stdin), "stdin", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, path, err
	}
	return f, path, nil
}

type decodeStats struct {
	packets, roce, other, malformed, badICRC, cut int
}

// packetSource reads packets and the link type each one was captured on.
type packetSource interface {
	next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error)
}

type pcapSource struct{ r *pcapgo.Reader }

func (s pcapSource) next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	data, ci, err := s.r.ReadPacketData()
	return data, ci, s.r.LinkType(), err
}

// pcapngSource reads pcapng. pcapgo reports a file that ends inside a block
// as a clean end of file, so the source keeps the bytes read past the last
// whole packet and, at the end, checks that they are whole blocks.
type pcapngSource struct {
	r     *pcapgo.NgReader
	br    *bufio.Reader // the reader pcapgo reads from
	in    *tailReader   // what br reads from
	order binary.ByteOrder
}

// tailReader keeps the bytes read since the last mark.
type tailReader struct {
	r    io.Reader
	keep bool
	tail []byte
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.keep {
		t.tail = append(t.tail, p[:n]...)
	}
	return n, err
}

// mark forgets all bytes but the last unread ones (still in the bufio
// buffer in front of this reader).
func (t *tailReader) mark(unread int) {
	t.tail = append(t.tail[:0], t.tail[len(t.tail)-unread:]...)
}

func (s *pcapngSource) next() ([]byte, gopacket.CaptureInfo, layers.LinkType, error) {
	data, ci, err := s.r.ReadPacketData()
	if errors.Is(err, io.EOF) {
		return nil, ci, 0, s.checkTail()
	}
	if err != nil {
		return nil, ci, 0, err
	}
	s.in.mark(s.br.Buffered())
	iface, ierr := s.r.Interface(ci.InterfaceIndex)
	if ierr != nil {
		return nil, ci, 0, fmt.Errorf("packet on interface %d: %w", ci.InterfaceIndex, ierr)
	}
	return data, ci, iface.LinkType, nil
}

// checkTail walks the blocks after the last packet: io.EOF when they end
// exactly at the end of the file, an error naming the cut otherwise.
func (s *pcapngSource) checkTail() error {
	b := s.in.tail
	for len(b) > 0 {
		if len(b) < 12 {
			return fmt.Errorf("pcapng: the file ends inside a block header (%d stray bytes)", len(b))
		}
		n := int(s.order.Uint32(b[4:]))
		if n < 12 || n%4 != 0 {
			return fmt.Errorf("pcapng: block of type %#x has a bad length %d", s.order.Uint32(b), n)
		}
		if n > len(b) {
			return fmt.Errorf("pcapng: the file ends inside a block of type %#x: %d of its %d bytes are there", s.order.Uint32(b), len(b), n)
		}
		b = b[n:]
	}
	return io.EOF
}

// openCapture recognises pcap and pcapng by their magic numbers.
func openCapture(r io.Reader) (packetSource, error) {
	tr := &tailReader{r: r, keep: true}
	br := bufio.NewReader(tr)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("reading the file header: %w (an empty or truncated file?)", err)
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0x0a0d0d0a:
		shb, err := br.Peek(12)
		if err != nil {
			return nil, fmt.Errorf("pcapng section header: %w", err)
		}
		var order binary.ByteOrder = binary.LittleEndian
		if binary.BigEndian.Uint32(shb[8:]) == 0x1a2b3c4d {
			order = binary.BigEndian
		}
		// pcapgo reads from br itself when given a bufio.Reader.
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return nil, fmt.Errorf("pcapng: %w", err)
		}
		tr.mark(br.Buffered())
		return &pcapngSource{r: ng, br: br, in: tr, order: order}, nil
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1:
		p, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("pcap: %w", err)
		}
		tr.keep, tr.tail = false, nil // pcapgo reports cut pcap files itself
		return pcapSource{p}, nil
	}
	return nil, fmt.Errorf("not a pcap or pcapng file (magic %x)", magic)
}

func decodeCapture(r io.Reader, w io.Writer, jsonOut bool) (decodeStats, error) {
	var st decodeStats
	src, err := openCapture(r)
	if err != nil {
		return st, err
	}
	enc := json.NewEncoder(w)
	var f roce.Frame
	for {
		data, ci, lt, err := src.next()
		if errors.Is(err, io.EOF) {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("after packet %d: %w", st.packets, err)
		}
		st.packets++
		rec := decodeRecord(&f, st.packets, data, ci, lt)
		switch {
		case !rec.RoCE:
			st.other++
		case rec.cut:
			st.roce++
			st.cut++
		case rec.bth != nil && rec.ICRCOK != nil && !*rec.ICRCOK:
			st.roce++
			st.badICRC++
		case rec.Error != "":
			st.roce++
			st.malformed++
		default:
			st.roce++
		}
		if jsonOut {
			err = enc.Encode(rec)
		} else {
			_, err = io.WriteString(w, rec.text()+"\n")
		}
		if err != nil {
			return st, err
		}
	}
}

// record is one decoded packet, as printed.
type record struct {
	N     int    `json:"n"`
	RoCE  bool   `json:"roce"`
	Src   string `json:"src,omitempty"`
	Dst   string `json:"dst,omitempty"`
	*bth         // present once the BTH decoded
	Error string `json:"error,omitempty"`

	notRoCE string // why the packet is not RoCEv2, for the text form
	ecnCE   bool   // IP ECN says congestion experienced, for the text form
	cut     bool   // the capture's snap length cut the packet
}

type bth struct {
	Opcode       string         `json:"opcode"`
	OpcodeNum    uint8          `json:"opcode_num"`
	SE           bool           `json:"se"`
	MigReq       bool           `json:"migreq"`
	Pad          int            `json:"pad"`
	PKey         uint16         `json:"pkey"`
	FECN         bool           `json:"fecn"`
	BECN         bool           `json:"becn"`
	DQPN         uint32         `json:"dqpn"`
	AckReq       bool           `json:"ackreq"`
	PSN          uint32         `json:"psn"`
	PayloadLen   *int           `json:"payload_len,omitempty"`
	ICRC         *uint32        `json:"icrc,omitempty"`
	ICRCOK       *bool          `json:"icrc_ok,omitempty"`
	RETH         *rethJSON      `json:"reth,omitempty"`
	AETH         *aethJSON      `json:"aeth,omitempty"`
	Imm          *uint32        `json:"imm,omitempty"`
	IETH         *iethJSON      `json:"ieth,omitempty"`
	DETH         *dethJSON      `json:"deth,omitempty"`
	AtomicETH    *atomicJSON    `json:"atomic_eth,omitempty"`
	AtomicAckETH *atomicAckJSON `json:"atomic_ack_eth,omitempty"`
}

type rethJSON struct {
	VA     uint64 `json:"va"`
	RKey   uint32 `json:"rkey"`
	DMALen uint32 `json:"dma_len"`
}

type aethJSON struct {
	Syndrome uint8  `json:"syndrome"`
	MSN      uint32 `json:"msn"`
}

type iethJSON struct {
	RKey uint32 `json:"rkey"`
}

type dethJSON struct {
	QKey uint32 `json:"qkey"`
	SQPN uint32 `json:"sqpn"`
}

type atomicJSON struct {
	VA      uint64 `json:"va"`
	RKey    uint32 `json:"rkey"`
	SwapAdd uint64 `json:"swap_add"`
	Compare uint64 `json:"compare"`
}

type atomicAckJSON struct {
	Orig uint64 `json:"orig"`
}

// Link types rbridge reads besides Ethernet.
const (
	linkTypeRawBSD = 12  // DLT_RAW on OpenBSD-derived systems
	linkTypeRawAlt = 14  // DLT_RAW on some BSDs
	linkTypeRaw    = 101 // LINKTYPE_RAW
	linkTypeIPv4   = 228
	linkTypeIPv6   = 229
	linkTypeSLL    = 113
)

// maxSnapPad bounds the zero padding decodeRecord adds to packets that the
// capture cut short (snap length): no real frame is longer.
const maxSnapPad = 1 << 18

func decodeRecord(f *roce.Frame, n int, data []byte, ci gopacket.CaptureInfo, lt layers.LinkType) *record {
	rec := &record{N: n}
	// A capture with a snap length keeps only the first bytes of each packet.
	// Pad the rest with zeros so the headers that were captured still decode;
	// only what was captured is reported, and the ICRC is not checked.
	cut := ci.CaptureLength < ci.Length && ci.Length <= maxSnapPad && len(data) == ci.CaptureLength
	if cut {
		data = append(data[:len(data):len(data)], make([]byte, ci.Length-ci.CaptureLength)...)
	}
	var err error
	switch lt {
	case layers.LinkTypeEthernet:
		err = f.DecodeEthernet(data)
	case linkTypeRaw, linkTypeRawBSD, linkTypeRawAlt, linkTypeIPv4, linkTypeIPv6:
		err = f.DecodeIP(data)
	case linkTypeSLL:
		err = decodeCooked(f, data)
	default:
		rec.Error = fmt.Sprintf("link type %v (%d) is not supported: rbridge reads Ethernet, raw IP and Linux cooked captures", lt, lt)
		return rec
	}
	if f.Src.IsValid() {
		rec.Src, rec.Dst = f.Src.String(), f.Dst.String()
	}
	rec.RoCE = f.Dst.Port() == roce.Port && f.Src.IsValid()
	rec.ecnCE = f.ECN == roce.ECNCE
	if err != nil && errors.Is(err, roce.ErrNotRoCEv2) {
		rec.notRoCE = err.Error()
		return rec
	}
	if cut {
		// Where the transport headers end, counted from the start of data
		// (the frame's views share data's array and run to its end).
		hdrEnd := len(data) + 1
		if p := f.UDPPayload(); p != nil && f.Packet.BTH != nil {
			hdrEnd = cap(data) - cap(p) + roce.BTHLen + f.Packet.Opcode().HeaderLen()
		}
		if hdrEnd > ci.CaptureLength {
			if p := f.UDPPayload(); p != nil && f.Packet.BTH != nil && cap(data)-cap(p)+roce.BTHLen <= ci.CaptureLength {
				rec.bth = bthRecord(&roce.Packet{BTH: f.Packet.BTH}) // the BTH alone was captured
			}
			rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes, cutting it inside its headers", ci.CaptureLength, ci.Length)
			rec.cut = true
			return rec
		}
	}
	if f.Packet.BTH != nil {
		rec.bth = bthRecord(&f.Packet)
	}
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	pl := len(f.Packet.Payload)
	rec.bth.PayloadLen = &pl
	if cut {
		rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes: payload and ICRC not checked", ci.CaptureLength, ci.Length)
		rec.cut = true
		return rec
	}
	crc, err := roce.ICRC(f.IP)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	ok := crc == f.Packet.ICRC
	rec.bth.ICRC = &f.Packet.ICRC
	rec.bth.ICRCOK = &ok
	if !ok {
		rec.Error = fmt.Sprintf("ICRC mismatch: carried %#08x, computed %#08x", f.Packet.ICRC, crc)
	}
	return rec
}

// decodeCooked decodes Linux "cooked" captures (tcpdump -i any).
func decodeCooked(f *roce.Frame, data []byte) error {
	const hdr, protoAt = 16, 14
	if len(data) < hdr {
		return &roce.HeaderError{Header: "Linux cooked header", Err: roce.ErrTruncated, Need: hdr, Have: len(data)}
	}
	if p := binary.BigEndian.Uint16(data[protoAt:]); p != 0x0800 && p != 0x86dd {
		return &roce.HeaderError{Header: "protocol", Err: roce.ErrNotRoCEv2, Value: uint64(p)}
	}
	return f.DecodeIP(data[hdr:])
}

func bthRecord(p *roce.Packet) *bth {
	h := p.BTH
	b := &bth{
		Opcode: h.Opcode().String(), OpcodeNum: uint8(h.Opcode()), SE: h.SE(), MigReq: h.MigReq(),
		Pad: h.PadCount(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(), DQPN: h.DestQP(),
		AckReq: h.AckReq(), PSN: h.PSN(),
	}
	if p.RETH != nil {
		b.RETH = &rethJSON{VA: p.RETH.VA(), RKey: p.RETH.RKey(), DMALen: p.RETH.DMALen()}
	}
	if p.AETH != nil {
		b.AETH = &aethJSON{Syndrome: uint8(p.AETH.Syndrome()), MSN: p.AETH.MSN()}
	}
	if p.ImmDt != nil {
		v := p.ImmDt.Imm()
		b.Imm = &v
	}
	if p.IETH != nil {
		b.IETH = &iethJSON{RKey: p.IETH.RKey()}
	}
	if p.DETH != nil {
		b.DETH = &dethJSON{QKey: p.DETH.QKey(), SQPN: p.DETH.SrcQP()}
	}
	if p.AtomicETH != nil {
		a := p.AtomicETH
		b.AtomicETH = &atomicJSON{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
	}
	if p.AtomicAckETH != nil {
		b.AtomicAckETH = &atomicAckJSON{Orig: p.AtomicAckETH.Orig()}
	}
	return b
}

// text renders the record on one line.
func (r *record) text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%5d ", r.N)
	if r.Src != "" {
		fmt.Fprintf(&sb, "%s > %s ", r.Src, r.Dst)
	}
	if !r.RoCE {
		sb.WriteString("not RoCEv2")
		switch {
		case r.Error != "":
			sb.WriteString(": " + r.Error)
		case r.notRoCE != "":
			sb.WriteString(" (" + strings.TrimPrefix(r.notRoCE, "roce: ") + ")")
		}
		return sb.String()
	}
	if b := r.bth; b != nil {
		fmt.Fprintf(&sb, "%s qp=%#06x psn=%d", b.Opcode, b.DQPN, b.PSN)
		for _, fl := range []struct {
			on   bool
			name string
		}{{b.SE, "SE"}, {b.MigReq, "M"}, {b.FECN, "FECN"}, {b.BECN, "BECN"}, {b.AckReq, "A"}, {r.ecnCE, "ECN-CE"}} {
			if fl.on {
				sb.WriteString(" " + fl.name)
			}
		}
		if b.PKey != roce.DefaultPKey {
			fmt.Fprintf(&sb, " pkey=%#04x", b.PKey)
		}
		if b.RETH != nil {
			fmt.Fprintf(&sb, " reth(va=%#x rkey=%#x len=%d)", b.RETH.VA, b.RETH.RKey, b.RETH.DMALen)
		}
		if b.AETH != nil {
			fmt.Fprintf(&sb, " aeth(%v msn=%d)", roce.Syndrome(b.AETH.Syndrome), b.AETH.MSN)
		}
		if b.AtomicETH != nil {
			a := b.AtomicETH
			fmt.Fprintf(&sb, " atomic(va=%#x rkey=%#x swap_add=%#x compare=%#x)", a.VA, a.RKey, a.SwapAdd, a.Compare)
		}
		if b.AtomicAckETH != nil {
			fmt.Fprintf(&sb, " atomic_ack(orig=%#x)", b.AtomicAckETH.Orig)
		}
		if b.DETH != nil {
			fmt.Fprintf(&sb, " deth(qkey=%#x sqpn=%#06x)", b.DETH.QKey, b.DETH.SQPN)
		}
		if b.Imm != nil {
			fmt.Fprintf(&sb, " imm=%#08x", *b.Imm)
		}
		if b.IETH != nil {
			fmt.Fprintf(&sb, " ieth(rkey=%#x)", b.IETH.RKey)
		}
		if b.PayloadLen != nil {
			fmt.Fprintf(&sb, " len=%d", *b.PayloadLen)
		}
		if b.Pad != 0 {
			fmt.Fprintf(&sb, " pad=%d", b.Pad)
		}
		if b.ICRCOK != nil {
			verdict := "ok"
			if !*b.ICRCOK {
				verdict = "BAD"
			}
			fmt.Fprintf(&sb, " icrc=%#08x %s", *b.ICRC, verdict)
		}
	}
	line := strings.TrimRight(sb.String(), " ")
	switch {
	case r.cut:
		line += " CUT: " + r.Error
	case r.Error != "" && (r.bth == nil || r.bth.ICRCOK == nil):
		line += " MALFORMED: " + r.Error
	}
	return line
}
