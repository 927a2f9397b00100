package roce

import "strconv"

// Opcode is the BTH opcode: the transport service in the top three bits
// (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80, XRC 0xa0) and the operation
// in the low five. Names follow the Linux kernel's include/rdma/ib_pack.h
// (its XRC names are those of the rxe XRC patches, which add them there).
//
// rbridge speaks RC, UC and UD and answers CNPs: those opcodes are Valid.
// The table also knows the opcodes of RD and XRC, with their extension
// headers, so that tools showing packets name and decode them
// (Packet.Dissect); they are not Valid, and ParseBTH and Packet.Decode
// refuse them. Not in the table yet: the memory placement extensions'
// RC_FLUSH (0x1c), RC_ATOMIC_WRITE (0x1d) and RD_FLUSH (0x5c), which
// ib_pack.h names too; they are reported as reserved.
type Opcode uint8

// RC opcodes.
const (
	RCSendFirst                  Opcode = 0x00
	RCSendMiddle                 Opcode = 0x01
	RCSendLast                   Opcode = 0x02
	RCSendLastWithImmediate      Opcode = 0x03
	RCSendOnly                   Opcode = 0x04
	RCSendOnlyWithImmediate      Opcode = 0x05
	RCRDMAWriteFirst             Opcode = 0x06
	RCRDMAWriteMiddle            Opcode = 0x07
	RCRDMAWriteLast              Opcode = 0x08
	RCRDMAWriteLastWithImmediate Opcode = 0x09
	RCRDMAWriteOnly              Opcode = 0x0a
	RCRDMAWriteOnlyWithImmediate Opcode = 0x0b
	RCRDMAReadRequest            Opcode = 0x0c
	RCRDMAReadResponseFirst      Opcode = 0x0d
	RCRDMAReadResponseMiddle     Opcode = 0x0e
	RCRDMAReadResponseLast       Opcode = 0x0f
	RCRDMAReadResponseOnly       Opcode = 0x10
	RCAcknowledge                Opcode = 0x11
	RCAtomicAcknowledge          Opcode = 0x12
	RCCompareSwap                Opcode = 0x13
	RCFetchAdd                   Opcode = 0x14
	RCSendLastWithInvalidate     Opcode = 0x16
	RCSendOnlyWithInvalidate     Opcode = 0x17
)

// UC opcodes.
const (
	UCSendFirst                  Opcode = 0x20
	UCSendMiddle                 Opcode = 0x21
	UCSendLast                   Opcode = 0x22
	UCSendLastWithImmediate      Opcode = 0x23
	UCSendOnly                   Opcode = 0x24
	UCSendOnlyWithImmediate      Opcode = 0x25
	UCRDMAWriteFirst             Opcode = 0x26
	UCRDMAWriteMiddle            Opcode = 0x27
	UCRDMAWriteLast              Opcode = 0x28
	UCRDMAWriteLastWithImmediate Opcode = 0x29
	UCRDMAWriteOnly              Opcode = 0x2a
	UCRDMAWriteOnlyWithImmediate Opcode = 0x2b
)

// UD opcodes, and the RoCEv2 congestion notification packet.
const (
	UDSendOnly              Opcode = 0x64
	UDSendOnlyWithImmediate Opcode = 0x65
	CNP                     Opcode = 0x81
)

// Header is a set of extension headers that follow the BTH.
type Header uint16

// Extension headers. On the wire they follow the BTH in the order RDETH,
// DETH, XRCETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (IBTA 9.2);
// the CNP's reserved bytes stand alone.
const (
	HdrDETH Header = 1 << iota
	HdrRETH
	HdrAtomicETH
	HdrAETH
	HdrAtomicAckETH
	HdrImmDt
	HdrIETH
	HdrCNP    // the 16 reserved bytes of a CNP
	HdrRDETH  // RD only
	HdrXRCETH // XRC requests only
)

// Position tells where a packet sits in a multi-packet message.
type Position uint8

// Positions. A packet that is not part of a message (an ACK, a CNP) has
// PositionNone.
const (
	PositionNone Position = iota
	PositionFirst
	PositionMiddle
	PositionLast
	PositionOnly
)

var positionNames = [...]string{"none", "first", "middle", "last", "only"}

func (p Position) String() string {
	if int(p) < len(positionNames) {
		return positionNames[p]
	}
	return "Position(" + strconv.Itoa(int(p)) + ")"
}

// Kind is what an opcode does.
type Kind uint8

// Kinds of operation.
const (
	KindNone Kind = iota
	KindSend
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomic
	KindAtomicAck
	KindCNP
)

type opInfo struct {
	name    string
	spoken  bool // a service rbridge speaks: RC, UC, UD, CNP
	hdrs    Header
	hdrLen  uint8 // extension header bytes after the BTH
	payload bool  // carries (possibly empty) payload
	pos     Position
	kind    Kind
}

// Extension header lengths in bytes.
const (
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	DETHLen         = 8
	CNPReservedLen  = 16
	RDETHLen        = 4
	XRCETHLen       = 4
	ICRCLen         = 4
)

func hdrLen(h Header) uint8 {
	var n uint8
	for _, e := range [...]struct {
		h Header
		n uint8
	}{{HdrDETH, DETHLen}, {HdrRETH, RETHLen}, {HdrAtomicETH, AtomicETHLen},
		{HdrAETH, AETHLen}, {HdrAtomicAckETH, AtomicAckETHLen}, {HdrImmDt, ImmDtLen},
		{HdrIETH, IETHLen}, {HdrCNP, CNPReservedLen}, {HdrRDETH, RDETHLen}, {HdrXRCETH, XRCETHLen}} {
		if h&e.h != 0 {
			n += e.n
		}
	}
	return n
}

// opcodes is the table of every opcode rbridge knows; a zero name marks a
// reserved opcode.
var opcodes = func() (t [256]opInfo) {
	def := func(op Opcode, name string, hdrs Header, payload bool, pos Position, kind Kind) {
		t[op] = opInfo{name: name, spoken: true, hdrs: hdrs, hdrLen: hdrLen(hdrs), payload: payload, pos: pos, kind: kind}
	}
	// Send and RDMA write are the same on RC and UC.
	for _, svc := range []struct {
		base Opcode
		name string
	}{{0x00, "RC_"}, {0x20, "UC_"}} {
		b, n := svc.base, svc.name
		def(b+0x00, n+"SEND_FIRST", 0, true, PositionFirst, KindSend)
		def(b+0x01, n+"SEND_MIDDLE", 0, true, PositionMiddle, KindSend)
		def(b+0x02, n+"SEND_LAST", 0, true, PositionLast, KindSend)
		def(b+0x03, n+"SEND_LAST_WITH_IMMEDIATE", HdrImmDt, true, PositionLast, KindSend)
		def(b+0x04, n+"SEND_ONLY", 0, true, PositionOnly, KindSend)
		def(b+0x05, n+"SEND_ONLY_WITH_IMMEDIATE", HdrImmDt, true, PositionOnly, KindSend)
		def(b+0x06, n+"RDMA_WRITE_FIRST", HdrRETH, true, PositionFirst, KindWrite)
		def(b+0x07, n+"RDMA_WRITE_MIDDLE", 0, true, PositionMiddle, KindWrite)
		def(b+0x08, n+"RDMA_WRITE_LAST", 0, true, PositionLast, KindWrite)
		def(b+0x09, n+"RDMA_WRITE_LAST_WITH_IMMEDIATE", HdrImmDt, true, PositionLast, KindWrite)
		def(b+0x0a, n+"RDMA_WRITE_ONLY", HdrRETH, true, PositionOnly, KindWrite)
		def(b+0x0b, n+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", HdrRETH|HdrImmDt, true, PositionOnly, KindWrite)
	}
	def(RCRDMAReadRequest, "RC_RDMA_READ_REQUEST", HdrRETH, false, PositionOnly, KindReadRequest)
	def(RCRDMAReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", HdrAETH, true, PositionFirst, KindReadResponse)
	def(RCRDMAReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, true, PositionMiddle, KindReadResponse)
	def(RCRDMAReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", HdrAETH, true, PositionLast, KindReadResponse)
	def(RCRDMAReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", HdrAETH, true, PositionOnly, KindReadResponse)
	def(RCAcknowledge, "RC_ACKNOWLEDGE", HdrAETH, false, PositionNone, KindAck)
	def(RCAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", HdrAETH|HdrAtomicAckETH, false, PositionNone, KindAtomicAck)
	def(RCCompareSwap, "RC_COMPARE_SWAP", HdrAtomicETH, false, PositionOnly, KindAtomic)
	def(RCFetchAdd, "RC_FETCH_ADD", HdrAtomicETH, false, PositionOnly, KindAtomic)
	def(RCSendLastWithInvalidate, "RC_SEND_LAST_WITH_INVALIDATE", HdrIETH, true, PositionLast, KindSend)
	def(RCSendOnlyWithInvalidate, "RC_SEND_ONLY_WITH_INVALIDATE", HdrIETH, true, PositionOnly, KindSend)
	def(UDSendOnly, "UD_SEND_ONLY", HdrDETH, true, PositionOnly, KindSend)
	def(UDSendOnlyWithImmediate, "UD_SEND_ONLY_WITH_IMMEDIATE", HdrDETH|HdrImmDt, true, PositionOnly, KindSend)
	def(CNP, "CNP", HdrCNP, false, PositionNone, KindCNP)
	// RD and XRC: the RC operations under another service, RD without the
	// invalidating sends and with RESYNC, XRC with all of them. Every RD
	// packet carries an RDETH, and RD requests a DETH; XRC requests carry
	// an XRCETH. Responses are RC's otherwise.
	for op := RCSendFirst; op <= RCSendOnlyWithInvalidate; op++ {
		rc := t[op]
		if rc.name == "" {
			continue
		}
		name := rc.name[len("RC_"):]
		req := rc.kind == KindSend || rc.kind == KindWrite || rc.kind == KindReadRequest || rc.kind == KindAtomic
		if op != RCSendLastWithInvalidate && op != RCSendOnlyWithInvalidate {
			rd := rc
			rd.name, rd.spoken, rd.hdrs = "RD_"+name, false, rc.hdrs|HdrRDETH
			if req {
				rd.hdrs |= HdrDETH
			}
			rd.hdrLen = hdrLen(rd.hdrs)
			t[0x40+op] = rd
		}
		xrc := rc
		xrc.name, xrc.spoken = "XRC_"+name, false
		if req {
			xrc.hdrs |= HdrXRCETH
		}
		xrc.hdrLen = hdrLen(xrc.hdrs)
		t[0xa0+op] = xrc
	}
	t[0x55] = opInfo{name: "RD_RESYNC", hdrs: HdrRDETH | HdrDETH, hdrLen: hdrLen(HdrRDETH | HdrDETH)}
	return t
}()

// Valid reports whether o is an opcode rbridge speaks (RC, UC, UD or CNP).
func (o Opcode) Valid() bool { return opcodes[o].spoken }

// Known reports whether the table names o: it is Valid, or of the RD or XRC
// services, which rbridge decodes for display but does not speak.
func (o Opcode) Known() bool { return opcodes[o].name != "" }

// String returns the kernel's name for o without the IB_OPCODE_ prefix, or
// "RESERVED_0xNN" for an opcode outside the table.
func (o Opcode) String() string {
	if n := opcodes[o].name; n != "" {
		return n
	}
	const hex = "0123456789abcdef"
	return "RESERVED_0x" + string([]byte{hex[o>>4], hex[o&0xf]})
}

// Headers returns the extension headers that follow the BTH.
func (o Opcode) Headers() Header { return opcodes[o].hdrs }

// HeaderLen returns the total length of the extension headers in bytes.
func (o Opcode) HeaderLen() int { return int(opcodes[o].hdrLen) }

// HasPayload reports whether packets with this opcode carry a payload.
func (o Opcode) HasPayload() bool { return opcodes[o].payload }

// Position returns where in a message a packet with this opcode sits.
func (o Opcode) Position() Position { return opcodes[o].pos }

// Kind returns what the opcode does.
func (o Opcode) Kind() Kind { return opcodes[o].kind }

// Service returns the transport service bits (RC 0x00, UC 0x20, RD 0x40,
// UD 0x60, CNP 0x80, XRC 0xa0).
func (o Opcode) Service() uint8 { return uint8(o) & 0xe0 }

// IsRequest reports whether the opcode is sent by a requester (everything but
// read responses, acknowledgements and CNPs).
func (o Opcode) IsRequest() bool {
	switch o.Kind() {
	case KindSend, KindWrite, KindReadRequest, KindAtomic:
		return true
	}
	return false
}

// Has reports whether h contains every header in x.
func (h Header) Has(x Header) bool { return h&x == x }
