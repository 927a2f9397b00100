package roce

import "encoding/binary"

// Packet is a decoded RoCEv2 transport packet: the UDP payload from the BTH
// to the ICRC. Every field is a view into the decoded bytes; headers that the
// opcode does not carry are nil.
type Packet struct {
	BTH          BTH
	RDETH        RDETH  // RD packets only (Dissect)
	XRCETH       XRCETH // XRC requests only (Dissect)
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	DETH         DETH
	CNPReserved  []byte // the 16 reserved bytes of a CNP
	Payload      []byte // without the pad bytes
	Pad          []byte
	ICRC         uint32 // as carried in the trailer (little-endian on the wire)
}

// Decode parses b, the UDP payload of a RoCEv2 datagram. It checks the BTH
// (version, known opcode), that every extension header the opcode calls for
// is present, the pad count, and that the ICRC trailer is there; it does not
// check the ICRC itself (that needs the IP header: see ICRC). Decode does not
// allocate. On error p holds what was decoded before the fault.
func (p *Packet) Decode(b []byte) error { return p.decode(b, Opcode.Valid) }

// Dissect is Decode for tools that show packets: it also decodes the
// opcodes of the services rbridge does not speak (RD and XRC, with their
// RDETH, DETH and XRCETH), every opcode that Opcode.Known reports. The
// transport uses Decode, which refuses them.
func (p *Packet) Dissect(b []byte) error { return p.decode(b, Opcode.Known) }

func (p *Packet) decode(b []byte, accept func(Opcode) bool) error {
	*p = Packet{}
	bth, n, err := parseBTH(b, accept)
	if err != nil {
		return err
	}
	p.BTH = bth
	op := bth.Opcode()
	need := BTHLen + op.HeaderLen() + ICRCLen
	if len(b) < need {
		return truncated(op.String(), need, len(b))
	}
	hdrs := op.Headers()
	// Extension headers follow the BTH in this order (IBTA 9.2, Table 38 and
	// the kernel's rxe_opcode.c offsets).
	if hdrs&HdrRDETH != 0 {
		p.RDETH = RDETH(b[n : n+RDETHLen])
		n += RDETHLen
	}
	if hdrs&HdrDETH != 0 {
		p.DETH = DETH(b[n : n+DETHLen])
		n += DETHLen
	}
	if hdrs&HdrXRCETH != 0 {
		p.XRCETH = XRCETH(b[n : n+XRCETHLen])
		n += XRCETHLen
	}
	if hdrs&HdrRETH != 0 {
		p.RETH = RETH(b[n : n+RETHLen])
		n += RETHLen
	}
	if hdrs&HdrAtomicETH != 0 {
		p.AtomicETH = AtomicETH(b[n : n+AtomicETHLen])
		n += AtomicETHLen
	}
	if hdrs&HdrAETH != 0 {
		p.AETH = AETH(b[n : n+AETHLen])
		n += AETHLen
	}
	if hdrs&HdrAtomicAckETH != 0 {
		p.AtomicAckETH = AtomicAckETH(b[n : n+AtomicAckETHLen])
		n += AtomicAckETHLen
	}
	if hdrs&HdrImmDt != 0 {
		p.ImmDt = ImmDt(b[n : n+ImmDtLen])
		n += ImmDtLen
	}
	if hdrs&HdrIETH != 0 {
		p.IETH = IETH(b[n : n+IETHLen])
		n += IETHLen
	}
	if hdrs&HdrCNP != 0 {
		p.CNPReserved = b[n : n+CNPReservedLen]
		n += CNPReservedLen
	}
	end := len(b) - ICRCLen
	p.ICRC = binary.LittleEndian.Uint32(b[end:])
	body := b[n:end]
	pad := bth.PadCount()
	if !op.HasPayload() {
		if len(body) != 0 || pad != 0 {
			return &HeaderError{Header: op.String(), Err: ErrBadPad, Value: uint64(len(body))}
		}
		return nil
	}
	if pad > len(body) {
		return &HeaderError{Header: "BTH pad", Err: ErrBadPad, Value: uint64(pad)}
	}
	p.Payload = body[:len(body)-pad]
	p.Pad = body[len(body)-pad:]
	return nil
}

// Opcode returns the packet's opcode.
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// Len returns the length of the transport packet, BTH to ICRC.
func (p *Packet) Len() int {
	return BTHLen + p.Opcode().HeaderLen() + len(p.Payload) + len(p.Pad) + ICRCLen
}

// PacketFields describes a whole transport packet for AppendPacket. Headers
// that the opcode does not carry are ignored.
type PacketFields struct {
	BTH          BTHFields // PadCount is computed from the payload length
	RETH         RETHFields
	AETH         AETHFields
	AtomicETH    AtomicETHFields
	AtomicAckETH AtomicAckETHFields
	ImmDt        ImmDtFields
	IETH         IETHFields
	DETH         DETHFields
	RDETH        RDETHFields  // RD opcodes only
	XRCETH       XRCETHFields // XRC requests only
}

// TransportLen returns the length of the transport packet (BTH to ICRC) for
// opcode op and a payload of n bytes, with the pad that aligns the payload to
// four bytes.
func TransportLen(op Opcode, n int) int {
	return BTHLen + op.HeaderLen() + n + padFor(n) + ICRCLen
}

func padFor(n int) int { return -n & 3 }

// AppendPacket appends a transport packet (BTH, extension headers, payload,
// zero pad, and a zero ICRC for PutICRC to fill) to b and returns the
// extended slice. It does not allocate when b has room.
func AppendPacket(b []byte, f *PacketFields, payload []byte) []byte {
	b, _ = appendPacket(b, f, len(payload), payload)
	return b
}

// AppendPacketGather is AppendPacket for a payload the caller sends from
// where it lies: it appends the headers, then the pad and the ICRC space,
// and returns where the payload goes (the headers' end). A Message carries
// the result as Buf, with Payload and Hdr set (roce.Message).
func AppendPacketGather(b []byte, f *PacketFields, payloadLen int) (out []byte, hdr int) {
	return appendPacket(b, f, payloadLen, nil)
}

// appendPacket appends the headers for a payload of payloadLen bytes, then
// payload (all of it, or nothing for a gathered send), then the pad and the
// ICRC space, zeroed; it returns the buffer and the end of the headers.
func appendPacket(b []byte, f *PacketFields, payloadLen int, payload []byte) ([]byte, int) {
	if f == nil {
		f = &PacketFields{} // nil is the zero value, as for options
	}
	payloadLen = max(payloadLen, 0)
	op := f.BTH.Opcode
	if !op.HasPayload() {
		payloadLen, payload = 0, nil
	}
	pad := padFor(payloadLen)
	start := len(b)
	b = grow(b, BTHLen+op.HeaderLen()+len(payload)+pad+ICRCLen)
	o := b[start:]
	bth := f.BTH
	bth.PadCount = uint8(pad)
	n := encodeHeaders(o, &bth, f)
	clear(o[n+copy(o[n:], payload):]) // pad and ICRC
	return b, start + n
}

// grow extends b by n bytes, reallocating only when b lacks the capacity.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// encodeHeaders writes the BTH from bth and the extension headers that its
// opcode carries from f into out, and returns their length.
func encodeHeaders(out []byte, bth *BTHFields, f *PacketFields) int {
	BTH(out).Encode(bth)
	n := BTHLen
	hdrs := bth.Opcode.Headers()
	if hdrs&HdrRDETH != 0 {
		RDETH(out[n:]).Encode(&f.RDETH)
		n += RDETHLen
	}
	if hdrs&HdrDETH != 0 {
		DETH(out[n:]).Encode(&f.DETH)
		n += DETHLen
	}
	if hdrs&HdrXRCETH != 0 {
		XRCETH(out[n:]).Encode(&f.XRCETH)
		n += XRCETHLen
	}
	if hdrs&HdrRETH != 0 {
		RETH(out[n:]).Encode(&f.RETH)
		n += RETHLen
	}
	if hdrs&HdrAtomicETH != 0 {
		AtomicETH(out[n:]).Encode(&f.AtomicETH)
		n += AtomicETHLen
	}
	if hdrs&HdrAETH != 0 {
		AETH(out[n:]).Encode(&f.AETH)
		n += AETHLen
	}
	if hdrs&HdrAtomicAckETH != 0 {
		AtomicAckETH(out[n:]).Encode(&f.AtomicAckETH)
		n += AtomicAckETHLen
	}
	if hdrs&HdrImmDt != 0 {
		ImmDt(out[n:]).Encode(&f.ImmDt)
		n += ImmDtLen
	}
	if hdrs&HdrIETH != 0 {
		IETH(out[n:]).Encode(&f.IETH)
		n += IETHLen
	}
	if hdrs&HdrCNP != 0 {
		clear(out[n : n+CNPReservedLen])
		n += CNPReservedLen
	}
	return n
}

// Fields returns the header values of the decoded packet; headers the
// opcode does not carry are zero.
func (p *Packet) Fields() PacketFields {
	var f PacketFields
	f.BTH = p.BTH.Fields()
	if p.RETH != nil {
		f.RETH = p.RETH.Fields()
	}
	if p.AETH != nil {
		f.AETH = p.AETH.Fields()
	}
	if p.AtomicETH != nil {
		f.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AtomicAckETH != nil {
		f.AtomicAckETH = p.AtomicAckETH.Fields()
	}
	if p.ImmDt != nil {
		f.ImmDt = p.ImmDt.Fields()
	}
	if p.IETH != nil {
		f.IETH = p.IETH.Fields()
	}
	if p.DETH != nil {
		f.DETH = p.DETH.Fields()
	}
	if p.RDETH != nil {
		f.RDETH = p.RDETH.Fields()
	}
	if p.XRCETH != nil {
		f.XRCETH = p.XRCETH.Fields()
	}
	return f
}
