package tunnel

import (
	"encoding/binary"
	"net/netip"
	"unicode/utf8"
)

// Open's body starts a session: who connects, to what, with what.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Client IP (16 bytes; IPv4 mapped)              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Client port          |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                Target IP (16 bytes; IPv4 mapped)              |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |          Target port          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Resp. resources |  Init. depth  |       Reserved (zero)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Operations taken in flight                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Private data (0 to MaxPrivateData bytes)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Responder resources and initiator depth are the client's, as its
// connection request gave them (the READs and atomics it takes and
// issues at once); the target's come back in Accept. Operations taken in
// flight is the opener's window for the Ops the other side sends it.
type Open []byte

const (
	openClient   = 0
	openTarget   = 18
	openRespRes  = 36
	openInitDep  = 37
	openMaxOps   = 40
	openLen      = 44
	acceptResp   = 0
	acceptInit   = 1
	acceptMaxOps = 4
	acceptLen    = 8
	rejectReason = 0
	rejectLen    = 4
	closeCode    = 0
	closeLen     = 4
)

// OpenFields are an Open frame's fields.
type OpenFields struct {
	Client, Target     netip.AddrPort
	RespRes, InitDepth uint8
	// MaxOps is how many Ops the opener takes before their Completions
	// (at least 1).
	MaxOps      uint32
	PrivateData []byte
}

func putAddrPort(b []byte, a netip.AddrPort) {
	ip := a.Addr().As16()
	copy(b, ip[:])
	binary.BigEndian.PutUint16(b[16:], a.Port())
}

func addrPort(b []byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])).Unmap(), binary.BigEndian.Uint16(b[16:]))
}

// Client returns the client's address.
func (o Open) Client() netip.AddrPort { return addrPort(o[openClient:]) }

// Target returns the target's address.
func (o Open) Target() netip.AddrPort { return addrPort(o[openTarget:]) }

// Fields returns the frame's fields; PrivateData aliases o.
func (o Open) Fields() OpenFields {
	return OpenFields{Client: o.Client(), Target: o.Target(), RespRes: o[openRespRes], InitDepth: o[openInitDep],
		MaxOps: binary.BigEndian.Uint32(o[openMaxOps:]), PrivateData: o[openLen:]}
}

// Append appends the whole Open frame, header included.
func (f *OpenFields) Append(b []byte) ([]byte, error) {
	if len(f.PrivateData) > MaxPrivateData {
		return b, malformed("Open frame: %d bytes of private data, at most %d", len(f.PrivateData), MaxPrivateData)
	}
	if !f.Target.IsValid() {
		return b, malformed("Open frame: no target address")
	}
	if f.MaxOps == 0 {
		return b, malformed("Open frame: a window of 0 operations")
	}
	b = appendHeader(b, TypeOpen, openLen+len(f.PrivateData))
	body := len(b)
	b = append(b, make([]byte, openLen)...)
	if f.Client.IsValid() {
		putAddrPort(b[body+openClient:], f.Client)
	}
	putAddrPort(b[body+openTarget:], f.Target)
	b[body+openRespRes], b[body+openInitDep] = f.RespRes, f.InitDepth
	binary.BigEndian.PutUint32(b[body+openMaxOps:], f.MaxOps)
	return append(b, f.PrivateData...), nil
}

// ParseOpen checks an Open frame's body.
func ParseOpen(body []byte) (Open, error) {
	if err := checkBody(TypeOpen, body); err != nil {
		return nil, err
	}
	o := Open(body)
	if !o.Target().Addr().IsValid() || o.Target().Port() == 0 || o.Target().Addr().IsUnspecified() {
		return nil, malformed("Open frame: target %v is not an address and port", o.Target())
	}
	if o.Fields().MaxOps == 0 {
		return nil, malformed("Open frame: a window of 0 operations")
	}
	return o, nil
}

// Accept's body answers Open: the target accepted.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Resp. resources |  Init. depth  |       Reserved (zero)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Operations taken in flight                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Private data (0 to MaxPrivateData bytes)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type Accept []byte

// AcceptFields are an Accept frame's fields.
type AcceptFields struct {
	RespRes, InitDepth uint8
	// MaxOps is how many Ops the accepting side takes before their
	// Completions (at least 1): the opener's window.
	MaxOps      uint32
	PrivateData []byte
}

// Fields returns the frame's fields; PrivateData aliases a.
func (a Accept) Fields() AcceptFields {
	return AcceptFields{RespRes: a[acceptResp], InitDepth: a[acceptInit],
		MaxOps: binary.BigEndian.Uint32(a[acceptMaxOps:]), PrivateData: a[acceptLen:]}
}

// Append appends the whole Accept frame.
func (f *AcceptFields) Append(b []byte) ([]byte, error) {
	if len(f.PrivateData) > MaxPrivateData {
		return b, malformed("Accept frame: %d bytes of private data, at most %d", len(f.PrivateData), MaxPrivateData)
	}
	if f.MaxOps == 0 {
		return b, malformed("Accept frame: a window of 0 operations")
	}
	b = appendHeader(b, TypeAccept, acceptLen+len(f.PrivateData))
	b = append(b, f.RespRes, f.InitDepth, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], f.MaxOps)
	return append(b, f.PrivateData...), nil
}

// ParseAccept checks an Accept frame's body.
func ParseAccept(body []byte) (Accept, error) {
	if err := checkBody(TypeAccept, body); err != nil {
		return nil, err
	}
	a := Accept(body)
	if a.Fields().MaxOps == 0 {
		return nil, malformed("Accept frame: a window of 0 operations")
	}
	return a, nil
}

// Reject's body answers Open: the target rejected, or could not be
// reached. Reason is an IB CM reject reason (the target's own, or
// timeout, or invalid service ID when the far gateway has no route).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Reason             |        Reserved (zero)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             Private data (0 to MaxPrivateData bytes)          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type Reject []byte

// RejectFields are a Reject frame's fields.
type RejectFields struct {
	Reason      uint16
	PrivateData []byte
}

// Fields returns the frame's fields; PrivateData aliases r.
func (r Reject) Fields() RejectFields {
	return RejectFields{Reason: binary.BigEndian.Uint16(r[rejectReason:]), PrivateData: r[rejectLen:]}
}

// Append appends the whole Reject frame.
func (f *RejectFields) Append(b []byte) ([]byte, error) {
	if len(f.PrivateData) > MaxPrivateData {
		return b, malformed("Reject frame: %d bytes of private data, at most %d", len(f.PrivateData), MaxPrivateData)
	}
	b = appendHeader(b, TypeReject, rejectLen+len(f.PrivateData))
	b = append(b, byte(f.Reason>>8), byte(f.Reason), 0, 0)
	return append(b, f.PrivateData...), nil
}

// ParseReject checks a Reject frame's body.
func ParseReject(body []byte) (Reject, error) {
	if err := checkBody(TypeReject, body); err != nil {
		return nil, err
	}
	return Reject(body), nil
}

// Close's body ends a session.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Code      |               Reserved (zero)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|              Reason, UTF-8 (0 to MaxReason bytes)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type Close []byte

// CloseCode says why a session ended.
type CloseCode uint8

// Close codes.
const (
	// CloseDisconnect: a peer disconnected (the normal end).
	CloseDisconnect CloseCode = 0
	// CloseFailed: the session failed (a connection's QP left RTS, a far
	// operation failed); Reason says what.
	CloseFailed CloseCode = 1
)

// CloseFields are a Close frame's fields.
type CloseFields struct {
	Code   CloseCode
	Reason string
}

// Fields returns the frame's fields.
func (c Close) Fields() CloseFields {
	return CloseFields{Code: CloseCode(c[closeCode]), Reason: string(c[closeLen:])}
}

// Append appends the whole Close frame; a reason longer than MaxReason is
// cut on a rune boundary.
func (f *CloseFields) Append(b []byte) []byte {
	r := f.Reason
	for len(r) > MaxReason {
		_, n := utf8.DecodeLastRuneInString(r)
		r = r[:len(r)-n]
	}
	b = appendHeader(b, TypeClose, closeLen+len(r))
	b = append(b, byte(f.Code), 0, 0, 0)
	return append(b, r...)
}

// ParseClose checks a Close frame's body.
func ParseClose(body []byte) (Close, error) {
	if err := checkBody(TypeClose, body); err != nil {
		return nil, err
	}
	c := Close(body)
	if code := CloseCode(c[closeCode]); code > CloseFailed {
		return nil, malformed("Close frame: code %d", code)
	}
	if !utf8.Valid(c[closeLen:]) {
		return nil, malformed("Close frame: reason is not UTF-8")
	}
	return c, nil
}
