package iser

import "fmt"

// CMHeader is the iSER CM header, the first bytes of the rdma_cm private
// data of an iSER connection's connect request and of its accept (struct
// iser_cm_hdr in include/scsi/iser.h; RFC 7145, 9.1.1 and 9.1.2).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Z|S| Reserved  |                 Reserved                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// In the request, Z (ISER_ZBVA_NOT_SUP, 0x80) says the initiator does not
// use zero-based virtual addresses (its descriptors' base offsets are
// absolute addresses) and S (ISER_SEND_W_INV_NOT_SUP, 0x40) that it does
// not take Send with Invalidate of its STags. The Linux initiator always
// sets Z, and S unless its always_register parameter is on (the default)
// (iser_route_handler in drivers/infiniband/ulp/iser/iser_verbs.c). In the
// accept the same bits say the target does not use them
// (ISERT_ZBVA_NOT_USED, ISERT_SEND_W_INV_NOT_USED): the Linux target
// always sets Z, and S unless the request allowed remote invalidation and
// its HCA has the memory management extensions (isert_rdma_accept,
// isert_set_nego_params in drivers/infiniband/ulp/isert/ib_isert.c); the
// Linux initiator invalidates remotely only when the accept's S is clear
// (iser_connected_handler), and ends the connection on a remote
// invalidation otherwise (iser_check_remote_inv).
//
// Over InfiniBand and RoCE the CM pads private data to its message's
// size, so a parser sees more bytes than the header; they are ignored.
type CMHeader []byte

// CMHeaderLen is the length of the iSER CM header.
const CMHeaderLen = 4

// CM header flags.
const (
	CMZBVANotSupported     = 0x80
	CMSendWInvNotSupported = 0x40
)

// CMHeaderFields holds the fields of an iSER CM header.
type CMHeaderFields struct {
	// NoZBVA: the sender does not use zero-based virtual addresses.
	NoZBVA bool
	// NoSendWInv: the sender does not take (request) or send (accept)
	// Send with Invalidate.
	NoSendWInv bool
	// Other are the flag byte's other bits, as sent.
	Other uint8
}

// IsValid reports whether h is long enough to hold the header.
func (h CMHeader) IsValid() bool { return len(h) >= CMHeaderLen }

func (h CMHeader) Flags() uint8     { return h[0] }
func (h CMHeader) NoZBVA() bool     { return h[0]&CMZBVANotSupported != 0 }
func (h CMHeader) NoSendWInv() bool { return h[0]&CMSendWInvNotSupported != 0 }
func (h CMHeader) SetFlags(f uint8) { h[0] = f }
func (h CMHeader) Fields() CMHeaderFields {
	return CMHeaderFields{NoZBVA: h.NoZBVA(), NoSendWInv: h.NoSendWInv(), Other: h[0] &^ (CMZBVANotSupported | CMSendWInvNotSupported)}
}

// Encode writes f into h (CMHeaderLen bytes: the reserved bytes zero).
func (h CMHeader) Encode(f *CMHeaderFields) {
	b := f.Other &^ (CMZBVANotSupported | CMSendWInvNotSupported)
	if f.NoZBVA {
		b |= CMZBVANotSupported
	}
	if f.NoSendWInv {
		b |= CMSendWInvNotSupported
	}
	h[0], h[1], h[2], h[3] = b, 0, 0, 0
}

// AppendCMHeader appends the encoding of f to b.
func AppendCMHeader(b []byte, f *CMHeaderFields) []byte {
	n := len(b)
	b = append(b, make([]byte, CMHeaderLen)...)
	CMHeader(b[n:]).Encode(f)
	return b
}

// ParseCMHeader checks that b starts with an iSER CM header and returns a
// view of it and its length.
func ParseCMHeader(b []byte) (CMHeader, int, error) {
	if len(b) < CMHeaderLen {
		return nil, 0, truncated("parse CM header", CMHeaderLen, len(b))
	}
	return CMHeader(b[:CMHeaderLen:CMHeaderLen]), CMHeaderLen, nil
}

func (f CMHeaderFields) String() string {
	return fmt.Sprintf("zbva not used %v, send with invalidate not used %v", f.NoZBVA, f.NoSendWInv)
}
