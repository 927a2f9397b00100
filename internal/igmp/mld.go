package igmp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
)

// MLD (RFC 2710, RFC 3810) is IGMP for IPv6, carried in ICMPv6. Its
// messages parse into the same Message as IGMP's, each given the IGMP type
// of the same meaning, so one Table keeps either family's membership:
//
//	MLD type                          Message.Type   Version
//	130 Multicast Listener Query      TypeQuery      1 (24 bytes) or 2 (28 or more)
//	131 MLDv1 Report                  TypeReportV2   1
//	132 Multicast Listener Done       TypeLeave      1
//	143 MLDv2 Report                  TypeReportV3   2
//
// An MLD message (the first 24 bytes of every one):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Maximum Response Code      |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                       Multicast Address                       +
//	|                         (128 bits)                            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// then, in an MLDv2 query, Resv(4) | S(1) | QRV(3) | QQIC(8) | Number of
// Sources(16) and the sources. An MLDv2 report has Reserved(16) | Number
// of Multicast Address Records(16) after the checksum, then the records:
// Record Type(8) | Aux Data Len(8) | Number of Sources(16) | Multicast
// Address(128) | the sources (128 bits each) | auxiliary data.

// The MLD message types.
const (
	mldQuery    = 130
	mldReportV1 = 131
	mldDone     = 132
	mldReportV2 = 143
)

const (
	// MLDLen is the length of an MLDv1 message and of an MLDv2 query's
	// common part; MLDQueryV2Len of an MLDv2 query with no sources.
	MLDLen        = 24
	MLDQueryV2Len = 28
	mldMaxResp    = 4
	mldGroup      = 8
	mldFlags      = 24
	mldQQIC       = 25
	mldSources    = 26
	mldRecords    = 6 // MLDv2 report: the number of records
)

// ParseMLD parses the MLD message b (an ICMPv6 message whose checksum the
// caller checked: it covers the IPv6 pseudo-header) and returns it, as the
// Message of the IGMP type of the same meaning, and the bytes it takes.
func ParseMLD(b []byte) (Message, int, error) {
	if len(b) < 8 {
		return Message{}, 0, fmt.Errorf("mld: parse %d bytes: %w", len(b), ErrTruncated)
	}
	var m Message
	n := MLDLen
	switch b[0] {
	case mldQuery, mldReportV1, mldDone:
		if len(b) < MLDLen {
			return Message{}, 0, fmt.Errorf("mld: parse type %d of %d bytes: %w", b[0], len(b), ErrTruncated)
		}
		m.Group = netip.AddrFrom16([16]byte(b[mldGroup:]))
		m.Version = 1
		code := binary.BigEndian.Uint16(b[mldMaxResp:])
		switch b[0] {
		case mldReportV1:
			m.Type = TypeReportV2
		case mldDone:
			m.Type = TypeLeave
		case mldQuery:
			m.Type, m.MaxResp = TypeQuery, time.Duration(code)*time.Millisecond
			switch {
			case len(b) == MLDLen:
			case len(b) < MLDQueryV2Len:
				return Message{}, 0, fmt.Errorf("mld: parse query of %d bytes: %w (24 for v1, 28 or more for v2)", len(b), ErrTruncated)
			default:
				m.Version, m.MaxResp = 2, DecodeMLDCode(code)
				m.SuppressRouter, m.QRV, m.QQIC = b[mldFlags]&0x08 != 0, b[mldFlags]&0x07, b[mldQQIC]
				m.Sources = int(binary.BigEndian.Uint16(b[mldSources:]))
				n = MLDQueryV2Len + 16*m.Sources
				if len(b) < n {
					return Message{}, 0, fmt.Errorf("mld: parse v2 query of %d bytes listing %d sources: %w", len(b), m.Sources, ErrTruncated)
				}
			}
		}
	case mldReportV2:
		m.Type, m.Version, n = TypeReportV3, 2, 8
		var err error
		if m.Records, n, err = parseRecords(b, n, int(binary.BigEndian.Uint16(b[mldRecords:])), 16, "mld: parse v2 report"); err != nil {
			return Message{}, 0, err
		}
	default:
		return Message{}, 0, fmt.Errorf("mld: parse ICMPv6 type %d: %w", b[0], ErrType)
	}
	return m, n, nil
}

// DecodeMLDCode is the time an MLDv2 Maximum Response Code stands for, in
// milliseconds: RFC 3810 section 5.1.3, the exponential form from 32768 up.
func DecodeMLDCode(c uint16) time.Duration {
	if c < 0x8000 {
		return time.Duration(c) * time.Millisecond
	}
	mant, exp := uint64(c&0x0fff), uint64(c>>12&0x07)
	return time.Duration((mant|0x1000)<<(exp+3)) * time.Millisecond
}

// EncodeMLDCode is the Maximum Response Code of d (milliseconds, the
// exponential form from 32.768 s), rounded down.
func EncodeMLDCode(d time.Duration) uint16 {
	t := uint64(d / time.Millisecond)
	if t < 0x8000 {
		return uint16(t)
	}
	for exp := uint64(0); exp < 8; exp++ {
		if v := t >> (exp + 3); v < 0x2000 {
			return uint16(0x8000 | exp<<12 | (v - 0x1000))
		}
	}
	return 0xffff
}

// AppendMLDQuery appends an MLDv2 query with q's fields (no sources, the
// checksum left 0: AppendPacket6 sets it) to b.
func AppendMLDQuery(b []byte, q QueryFields) []byte {
	off := len(b)
	b = append(b, make([]byte, MLDQueryV2Len)...)
	h := b[off:]
	h[0] = mldQuery
	binary.BigEndian.PutUint16(h[mldMaxResp:], EncodeMLDCode(q.MaxResp))
	if q.Group.Is6() {
		g := q.Group.As16()
		copy(h[mldGroup:], g[:])
	}
	h[mldFlags] = q.QRV & 0x07
	if q.SuppressRouter {
		h[mldFlags] |= 0x08
	}
	h[mldQQIC] = q.QQIC
	return b
}

// AppendMLDv1 appends an MLDv1 message (TypeReportV2: a report,
// TypeLeave: a done) for group to b, the checksum left 0.
func AppendMLDv1(b []byte, t Type, group netip.Addr) []byte {
	typ := uint8(mldReportV1)
	if t == TypeLeave {
		typ = mldDone
	}
	g := group.As16()
	b = append(b, typ, 0, 0, 0, 0, 0, 0, 0)
	return append(b, g[:]...)
}

// AppendMLDReportV2 appends an MLDv2 report of recs to b (each record
// lists Sources sources, fd00::1, fd00::2, ...), the checksum left 0.
func AppendMLDReportV2(b []byte, recs []Record) []byte {
	b = append(b, mldReportV2, 0, 0, 0, 0, 0, uint8(len(recs)>>8), uint8(len(recs)))
	for _, r := range recs {
		g := r.Group.As16()
		b = append(b, uint8(r.Type), 0, uint8(r.Sources>>8), uint8(r.Sources))
		b = append(b, g[:]...)
		for i := range r.Sources {
			b = append(b, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, uint8((i+1)>>8), uint8(i+1))
		}
	}
	return b
}
