package rpcrdma

import "encoding/binary"

// Segment is one RDMA segment (struct xdr_rdma_segment, RFC 8166 section
// 4.1.1; xdr_encode_rdma_segment in the Linux kernel's
// include/linux/sunrpc/rpc_rdma.h): a piece of the requester's memory a
// responder reaches with one-sided operations.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  handle (the RDMA key)                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  length                                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  offset (64: the address)                     |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// In a call's write list and reply chunk, length is the room the
// responder may write; the reply echoes each segment with the bytes it
// wrote (svc_rdma_encode_write_segment).
type Segment []byte

// SegmentLen is a segment's length.
const SegmentLen = 16

const (
	segHandle = 0
	segLength = 4
	segOffset = 8
)

// IsValid reports whether s holds a whole segment.
func (s Segment) IsValid() bool { return len(s) >= SegmentLen }

func (s Segment) Handle() uint32     { return binary.BigEndian.Uint32(s[segHandle:]) }
func (s Segment) Length() uint32     { return binary.BigEndian.Uint32(s[segLength:]) }
func (s Segment) Offset() uint64     { return binary.BigEndian.Uint64(s[segOffset:]) }
func (s Segment) SetHandle(v uint32) { binary.BigEndian.PutUint32(s[segHandle:], v) }
func (s Segment) SetLength(v uint32) { binary.BigEndian.PutUint32(s[segLength:], v) }
func (s Segment) SetOffset(v uint64) { binary.BigEndian.PutUint64(s[segOffset:], v) }

// SegmentFields are a segment's values.
type SegmentFields struct {
	Handle, Length uint32
	Offset         uint64
}

// Fields reads every field of s.
func (s Segment) Fields() SegmentFields {
	return SegmentFields{Handle: s.Handle(), Length: s.Length(), Offset: s.Offset()}
}

// Encode writes every field of f into s.
func (s Segment) Encode(f *SegmentFields) {
	s.SetHandle(f.Handle)
	s.SetLength(f.Length)
	s.SetOffset(f.Offset)
}

// ParseSegment returns the segment at the start of b.
func ParseSegment(b []byte) (Segment, int, error) {
	if len(b) < SegmentLen {
		return nil, 0, truncated("parse segment", "", 0, SegmentLen, len(b))
	}
	return Segment(b[:SegmentLen:SegmentLen]), SegmentLen, nil
}

// ReadSegmentFields are a read segment's values (struct xdr_read_chunk:
// the XDR position of the data in the RPC message, then the segment).
// Segments of one position form one read chunk; position 0 carries the
// whole RPC message of an RDMA_NOMSG call.
type ReadSegmentFields struct {
	Position uint32
	SegmentFields
}

// List names the chunk list a segment belongs to.
type List uint8

// Chunk lists.
const (
	// ListRead: the call's read list; the responder READs the segments.
	ListRead List = iota
	// ListWrite: a write chunk of the call's write list; the responder
	// WRITEs the segments (a result's bulk data, as an NFS READ's).
	ListWrite
	// ListReply: the reply chunk; the responder WRITEs its whole reply
	// there (and answers RDMA_NOMSG).
	ListReply
)

var listNames = [...]string{"read list", "write list", "reply chunk"}

func (l List) String() string {
	if int(l) < len(listNames) {
		return listNames[l]
	}
	return "List(?)"
}

// SegmentRef is a segment where it lies in a message.
type SegmentRef struct {
	List List
	// Chunk is the write chunk's number in the write list (from 0); 0
	// for the reply chunk and the read list.
	Chunk int
	// Index is the segment's number in its chunk (the read list: in the
	// list), from 0.
	Index int
	// Position is a read segment's position (0 for the others).
	Position uint32
	// Off is the segment's (its handle's) byte offset in the message.
	Off int
	// Segment is a view of the segment's bytes: its setters rewrite the
	// message in place.
	Segment Segment
}
