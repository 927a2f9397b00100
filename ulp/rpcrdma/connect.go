package rpcrdma

import (
	"encoding/binary"
	"fmt"
)

// ConnectPrivate is the rdma_cm private data of RFC 8797 (struct
// rpcrdma_connect_private in the Linux kernel's
// include/linux/sunrpc/rpc_rdma.h), which a requester's connect request
// and a responder's accept may carry; it is optional, and a peer that
// finds other bytes (or none) uses RPC-over-RDMA version 1's defaults
// (1024-byte inline thresholds, no remote invalidation).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  magic (0xf6ab0e18)                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   version (1) |  flags        |  send size    |  recv size    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Flag bit 0 (RPCRDMA_CMP_F_SND_W_INV_OK) says the sender takes Send With
// Invalidate: the Linux server then invalidates the one key a call names
// with its reply (svc_rdma_get_inv_rkey). The sizes are the sender's
// inline thresholds, in KiB less one (rpcrdma_encode_buffer_size): what
// it sends at most in one SEND, and what each of its receives holds.
type ConnectPrivate []byte

// ConnectPrivateLen is the private data's length.
const ConnectPrivateLen = 8

// Private data constants (rpc_rdma.h).
const (
	ConnectMagic   = 0xf6ab0e18
	ConnectVersion = 1
	// FlagSendWithInvalidateOK is RPCRDMA_CMP_F_SND_W_INV_OK.
	FlagSendWithInvalidateOK = 1 << 0
	// DefaultInline is version 1's inline threshold where no private
	// data says otherwise (RPCRDMA_V1_DEF_INLINE_SIZE).
	DefaultInline = 1024
)

const (
	cpMagic   = 0
	cpVersion = 4
	cpFlags   = 5
	cpSend    = 6
	cpRecv    = 7
)

// IsValid reports whether c holds the whole structure.
func (c ConnectPrivate) IsValid() bool { return len(c) >= ConnectPrivateLen }

func (c ConnectPrivate) Magic() uint32    { return binary.BigEndian.Uint32(c[cpMagic:]) }
func (c ConnectPrivate) Version() uint8   { return c[cpVersion] }
func (c ConnectPrivate) Flags() uint8     { return c[cpFlags] }
func (c ConnectPrivate) SetFlags(v uint8) { c[cpFlags] = v }

// SendSize and RecvSize are the sender's inline thresholds in bytes.
func (c ConnectPrivate) SendSize() int { return DecodeBufferSize(c[cpSend]) }
func (c ConnectPrivate) RecvSize() int { return DecodeBufferSize(c[cpRecv]) }

// SendWithInvalidateOK reports RPCRDMA_CMP_F_SND_W_INV_OK.
func (c ConnectPrivate) SendWithInvalidateOK() bool { return c.Flags()&FlagSendWithInvalidateOK != 0 }

// DecodeBufferSize is rpcrdma_decode_buffer_size: (v+1) KiB.
func DecodeBufferSize(v uint8) int { return (int(v) + 1) << 10 }

// EncodeBufferSize is rpcrdma_encode_buffer_size, size in KiB less one,
// for sizes of 1 KiB to 256 KiB (others clamped to them).
func EncodeBufferSize(size int) uint8 {
	return uint8(min(max(size>>10, 1), 256) - 1)
}

// ConnectPrivateFields are the private data's values.
type ConnectPrivateFields struct {
	Flags              uint8
	SendSize, RecvSize int // bytes, multiples of 1 KiB
}

// Fields reads every field of c.
func (c ConnectPrivate) Fields() ConnectPrivateFields {
	return ConnectPrivateFields{Flags: c.Flags(), SendSize: c.SendSize(), RecvSize: c.RecvSize()}
}

// AppendConnectPrivate appends the private data f describes to b, with
// the magic and version 1, as the Linux client (rpcrdma_ep_create) and
// server (svc_rdma_accept) write it.
func AppendConnectPrivate(b []byte, f *ConnectPrivateFields) []byte {
	b = binary.BigEndian.AppendUint32(b, ConnectMagic)
	return append(b, ConnectVersion, f.Flags, EncodeBufferSize(f.SendSize), EncodeBufferSize(f.RecvSize))
}

// ParseConnectPrivate reads RFC 8797 private data at the start of b
// (rdma_cm pads private data with zeros: bytes past it are not looked
// at). Like the Linux peers (svc_rdma_parse_connect_private,
// rpcrdma_update_cm_private), it takes only the magic and version 1.
func ParseConnectPrivate(b []byte) (ConnectPrivate, int, error) {
	const op = "parse connect private data"
	if len(b) < ConnectPrivateLen {
		return nil, 0, truncated(op, "", 0, ConnectPrivateLen, len(b))
	}
	c := ConnectPrivate(b[:ConnectPrivateLen:ConnectPrivateLen])
	if m := c.Magic(); m != ConnectMagic {
		return nil, 0, &Error{Op: op, Field: "magic", Offset: cpMagic, Err: ErrMagic, Detail: fmt.Sprintf("%#08x", m)}
	}
	if v := c.Version(); v != ConnectVersion {
		return nil, 0, &Error{Op: op, Field: "version", Offset: cpVersion, Err: ErrVersion, Detail: fmt.Sprintf("version %d", v)}
	}
	return c, ConnectPrivateLen, nil
}

// WithoutSendWithInvalidate returns RFC 8797 private data with
// RPCRDMA_CMP_F_SND_W_INV_OK cleared, in a copy (b is never written), for
// a peer that must not invalidate keys remotely; b itself when it is not
// such data (no magic, another version, too short) or the flag is not
// set.
func WithoutSendWithInvalidate(b []byte) []byte {
	c, _, err := ParseConnectPrivate(b)
	if err != nil || !c.SendWithInvalidateOK() {
		return b
	}
	out := append([]byte(nil), b...)
	ConnectPrivate(out).SetFlags(c.Flags() &^ FlagSendWithInvalidateOK)
	return out
}
