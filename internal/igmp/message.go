package igmp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Type is an IGMP message type.
type Type uint8

// The IGMP message types (RFC 3376 section 4, RFC 2236 section 2.1).
const (
	TypeQuery    Type = 0x11 // Membership Query, every version
	TypeReportV1 Type = 0x12
	TypeReportV2 Type = 0x16
	TypeLeave    Type = 0x17 // IGMPv2 Leave Group
	TypeReportV3 Type = 0x22
)

func (t Type) String() string {
	switch t {
	case TypeQuery:
		return "query"
	case TypeReportV1:
		return "v1 report"
	case TypeReportV2:
		return "v2 report"
	case TypeLeave:
		return "v2 leave"
	case TypeReportV3:
		return "v3 report"
	}
	return fmt.Sprintf("Type(%#x)", uint8(t))
}

// RecordType is the type of an IGMPv3 group record.
type RecordType uint8

// The IGMPv3 group record types (RFC 3376 section 4.2.12).
const (
	ModeIsInclude       RecordType = 1 // IS_IN: current state, INCLUDE
	ModeIsExclude       RecordType = 2 // IS_EX
	ChangeToIncludeMode RecordType = 3 // TO_IN: TO_IN({}) is a leave
	ChangeToExcludeMode RecordType = 4 // TO_EX: TO_EX({}) is a join
	AllowNewSources     RecordType = 5 // ALLOW
	BlockOldSources     RecordType = 6 // BLOCK
)

func (t RecordType) String() string {
	switch t {
	case ModeIsInclude:
		return "IS_IN"
	case ModeIsExclude:
		return "IS_EX"
	case ChangeToIncludeMode:
		return "TO_IN"
	case ChangeToExcludeMode:
		return "TO_EX"
	case AllowNewSources:
		return "ALLOW"
	case BlockOldSources:
		return "BLOCK"
	}
	return fmt.Sprintf("RecordType(%d)", uint8(t))
}

// Header is the 8-byte header every IGMP message starts with (the whole
// of an IGMPv1/v2 message).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      Type     | Max Resp Code |           Checksum            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Group Address                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// An IGMPv3 report has reserved bytes where Max Resp Code is, and
// Reserved (16) | Number of Group Records (16) where Group Address is.
type Header []byte

// HeaderLen is the length of Header, and of an IGMPv1/v2 message.
const HeaderLen = 8

const (
	hdrType    = 0
	hdrMaxResp = 1
	hdrCsum    = 2
	hdrGroup   = 4
	hdrRecords = 6 // v3 report: the number of group records

	// QueryV3Len is the length of an IGMPv3 query with no sources:
	// Header, then Resv(4) | S(1) | QRV(3) | QQIC(8) | Number of Sources(16).
	QueryV3Len = 12
	qFlags     = 8
	qQQIC      = 9
	qSources   = 10
)

// IsValid reports whether h holds a Header.
func (h Header) IsValid() bool { return len(h) >= HeaderLen }

// Type is the message type.
func (h Header) Type() Type { return Type(h[hdrType]) }

// MaxRespCode is the query's maximum response code.
func (h Header) MaxRespCode() uint8 { return h[hdrMaxResp] }

// Checksum is the message's checksum field.
func (h Header) Checksum() uint16 { return binary.BigEndian.Uint16(h[hdrCsum:]) }

// Group is the group address field (of a query, a v1/v2 report, a leave).
func (h Header) Group() netip.Addr { return netip.AddrFrom4([4]byte(h[hdrGroup:])) }

// SetType sets the message type.
func (h Header) SetType(t Type) { h[hdrType] = uint8(t) }

// SetMaxRespCode sets the maximum response code.
func (h Header) SetMaxRespCode(c uint8) { h[hdrMaxResp] = c }

// SetChecksum sets the checksum field.
func (h Header) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[hdrCsum:], c) }

// SetGroup sets the group address field.
func (h Header) SetGroup(g netip.Addr) { a := g.As4(); copy(h[hdrGroup:], a[:]) }

// Checksum computes the Internet checksum (RFC 1071) of b: a message whose
// checksum field holds the right value sums to 0.
func Checksum(b []byte) uint16 {
	var s uint32
	for ; len(b) >= 2; b = b[2:] {
		s += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// Record is an IGMPv3 group record, without its sources.
type Record struct {
	Type    RecordType
	Group   netip.Addr
	Sources int // how many sources the record lists
}

// Message is an IGMP message, parsed.
type Message struct {
	Type Type
	// Version is the IGMP version of the message: 1, 2 or 3 (a query is
	// v1 with an 8-byte form and Max Resp Code 0, v2 with an 8-byte form,
	// v3 with 12 bytes or more).
	Version int
	// Group is the group of a query (unspecified: a general query), of a
	// v1/v2 report or of a leave.
	Group netip.Addr
	// MaxResp is a query's maximum response time.
	MaxResp time.Duration
	// SuppressRouter (S), QRV and QQIC are an IGMPv3 query's.
	SuppressRouter bool
	QRV            uint8
	QQIC           uint8
	// Sources is how many sources an IGMPv3 query lists.
	Sources int
	// Records are an IGMPv3 report's group records.
	Records []Record
}

// Errors of Parse.
var (
	ErrTruncated = errors.New("truncated")
	ErrChecksum  = errors.New("bad checksum")
	ErrType      = errors.New("unknown message type")
)

// Parse parses the IGMP message b (an IPv4 packet's whole payload: the
// checksum covers all of it) and returns it and the bytes it takes.
// Unknown types (mtrace, DVMRP) are ErrType; a message shorter than its
// type's form, or than its lists say, is ErrTruncated; a checksum that
// does not add up is ErrChecksum.
func Parse(b []byte) (Message, int, error) {
	h := Header(b)
	if !h.IsValid() {
		return Message{}, 0, fmt.Errorf("igmp: parse %d bytes: %w", len(b), ErrTruncated)
	}
	m := Message{Type: h.Type()}
	n := HeaderLen
	switch m.Type {
	case TypeQuery:
		m.Group = h.Group()
		switch {
		case len(b) == HeaderLen && h.MaxRespCode() == 0:
			m.Version, m.MaxResp = 1, 10*time.Second // RFC 2236 section 4: a v1 query means 10 s
		case len(b) == HeaderLen:
			m.Version, m.MaxResp = 2, time.Duration(h.MaxRespCode())*100*time.Millisecond
		case len(b) < QueryV3Len:
			return Message{}, 0, fmt.Errorf("igmp: parse query of %d bytes: %w (8 for v1/v2, 12 or more for v3)", len(b), ErrTruncated)
		default:
			m.Version, m.MaxResp = 3, DecodeCode(h.MaxRespCode())
			m.SuppressRouter, m.QRV, m.QQIC = b[qFlags]&0x08 != 0, b[qFlags]&0x07, b[qQQIC]
			m.Sources = int(binary.BigEndian.Uint16(b[qSources:]))
			n = QueryV3Len + 4*m.Sources
			if len(b) < n {
				return Message{}, 0, fmt.Errorf("igmp: parse v3 query of %d bytes listing %d sources: %w", len(b), m.Sources, ErrTruncated)
			}
		}
	case TypeReportV1, TypeReportV2, TypeLeave:
		m.Version = 2
		if m.Type == TypeReportV1 {
			m.Version = 1
		}
		m.Group = h.Group()
	case TypeReportV3:
		m.Version = 3
		var err error
		if m.Records, n, err = parseRecords(b, n, int(binary.BigEndian.Uint16(b[hdrRecords:])), 4, "igmp: parse v3 report"); err != nil {
			return Message{}, 0, err
		}
	default:
		return Message{}, 0, fmt.Errorf("igmp: parse type %#x: %w", uint8(m.Type), ErrType)
	}
	if Checksum(b) != 0 {
		return Message{}, 0, fmt.Errorf("igmp: parse %v: checksum %#04x: %w", m.Type, h.Checksum(), ErrChecksum)
	}
	return m, n, nil
}

// DecodeCode is the time an IGMPv3 Max Resp Code or QQIC stands for, in
// tenths of a second (Max Resp Code) or seconds (QQIC, scale the result
// by 10): RFC 3376 section 4.1.1, the exponential form from 128 up.
func DecodeCode(c uint8) time.Duration {
	if c < 128 {
		return time.Duration(c) * 100 * time.Millisecond
	}
	mant, exp := uint32(c&0x0f), uint32(c>>4&0x07)
	return time.Duration((mant|0x10)<<(exp+3)) * 100 * time.Millisecond
}

// EncodeCode is the Max Resp Code of d (tenths of a second, the
// exponential form above 12.7 s, at most 3174.4 s), rounded down.
func EncodeCode(d time.Duration) uint8 {
	t := uint32(d / (100 * time.Millisecond))
	if t < 128 {
		return uint8(t)
	}
	for exp := uint32(0); exp < 8; exp++ {
		if mant := t>>(exp+3) - 0x10; t>>(exp+3) < 0x20 {
			return uint8(0x80 | exp<<4 | mant)
		}
	}
	return 0xff
}

// QueryFields are an IGMPv3 query's fields (with no sources).
type QueryFields struct {
	Group          netip.Addr // the unspecified address (or invalid): a general query
	MaxResp        time.Duration
	SuppressRouter bool
	QRV            uint8 // 0..7
	QQIC           uint8 // QQIC code (seconds, DecodeCode's form)
}

// AppendQuery appends an IGMPv3 query with q's fields, checksummed, to b.
func AppendQuery(b []byte, q QueryFields) []byte {
	off := len(b)
	b = append(b, make([]byte, QueryV3Len)...)
	h := Header(b[off:])
	h.SetType(TypeQuery)
	h.SetMaxRespCode(EncodeCode(q.MaxResp))
	if q.Group.Is4() {
		h.SetGroup(q.Group)
	}
	h[qFlags] = q.QRV & 0x07
	if q.SuppressRouter {
		h[qFlags] |= 0x08
	}
	h[qQQIC] = q.QQIC
	h.SetChecksum(Checksum(h))
	return b
}

// AppendV2 appends an 8-byte message of type t (a v1/v2 report, a leave,
// a v2 query with maxResp) for group, checksummed, to b.
func AppendV2(b []byte, t Type, group netip.Addr, maxResp time.Duration) []byte {
	off := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	h := Header(b[off:])
	h.SetType(t)
	h.SetMaxRespCode(uint8(min(maxResp/(100*time.Millisecond), 255)))
	h.SetGroup(group)
	h.SetChecksum(Checksum(h))
	return b
}

// AppendReportV3 appends an IGMPv3 report of recs, checksummed, to b;
// each record lists Sources sources (10.0.0.1, 10.0.0.2, ...) and no
// auxiliary data.
func AppendReportV3(b []byte, recs []Record) []byte {
	off := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	h := Header(b[off:])
	h.SetType(TypeReportV3)
	binary.BigEndian.PutUint16(h[hdrRecords:], uint16(len(recs)))
	for _, r := range recs {
		g := r.Group.As4()
		b = append(b, uint8(r.Type), 0, uint8(r.Sources>>8), uint8(r.Sources))
		b = append(b, g[:]...)
		for i := range r.Sources {
			b = append(b, 10, 0, uint8((i+1)>>8), uint8(i+1))
		}
	}
	h = Header(b[off:])
	h.SetChecksum(Checksum(h))
	return b
}

// parseRecords parses nrec group records from b at byte n. IGMPv3's and
// MLDv2's share their layout: Record Type (8) | Aux Data Len (8) |
// Number of Sources (16) | Multicast Address, then the sources and the
// auxiliary data (Aux Data Len 32-bit words), an address being addrLen
// bytes (4 or 16). It returns them and
// where they end; what names the message in an error.
func parseRecords(b []byte, n, nrec, addrLen int, what string) ([]Record, int, error) {
	var recs []Record
	for i := range nrec {
		if len(b) < n+4+addrLen {
			return nil, 0, fmt.Errorf("%s: record %d of %d at byte %d of %d: %w", what, i, nrec, n, len(b), ErrTruncated)
		}
		r := b[n:]
		rec := Record{Type: RecordType(r[0]), Sources: int(binary.BigEndian.Uint16(r[2:]))}
		if addrLen == 4 {
			rec.Group = netip.AddrFrom4([4]byte(r[4:8]))
		} else {
			rec.Group = netip.AddrFrom16([16]byte(r[4:20]))
		}
		size := 4 + addrLen + addrLen*rec.Sources + 4*int(r[1])
		if len(b) < n+size {
			return nil, 0, fmt.Errorf("%s: record %d of %d (%d sources, %d aux words) at byte %d of %d: %w", what, i, nrec, rec.Sources, r[1], n, len(b), ErrTruncated)
		}
		recs = append(recs, rec)
		n += size
	}
	return recs, n, nil
}
