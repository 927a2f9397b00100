package rpcrdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
)

// Message is a parsed transport header: the fixed words, then, for
// RDMA_MSG, RDMA_NOMSG and RDMA_MSGP, the three chunk lists (RFC 8166
// section 4.2.1, struct rpc_rdma_header_msg), each an XDR optional-data
// list:
//
//	read list:   { 1, position, handle, length, offset(64) } ... 0
//	write list:  { 1, count, count x { handle, length, offset(64) } } ... 0
//	reply chunk: 0 | 1, count, count x { handle, length, offset(64) }
//
// (rpcrdma_encode_read_list, _write_list, _reply_chunk in the Linux
// kernel's net/sunrpc/xprtrdma/rpc_rdma.c, "1 - PHLOO - 1 - PHLOO - 0").
// RDMA_MSGP has rdma_align and rdma_thresh before its lists; RDMA_ERROR
// its code (and, for ERR_VERS, the low and high versions); RDMA_DONE
// nothing. The RPC message of an RDMA_MSG (or RDMA_MSGP) follows the
// header, at Len.
//
// A Message is a view: its segments are views of the parsed bytes, and
// rewriting them rewrites the message.
type Message struct {
	b     []byte // the header, b[:Len]
	lists int    // where the read list starts (0: no lists)
}

const (
	msgpAlign  = HeaderLen
	msgpThresh = HeaderLen + 4
	errCode    = HeaderLen
	errLow     = HeaderLen + 4
	errHigh    = HeaderLen + 8
)

// Parse reads the transport header at the start of b and returns it and
// its length: where the RPC message (of an RDMA_MSG) starts. It walks
// the chunk lists once and does not allocate unless it fails.
func Parse(b []byte) (Message, int, error) {
	const op = "parse header"
	if len(b) < HeaderLen {
		return Message{}, 0, truncated(op, "", 0, HeaderLen, len(b))
	}
	h := Header(b)
	if v := h.Vers(); v != Version {
		return Message{}, 0, &Error{Op: op, Field: "rdma_vers", Offset: hdrVers, Err: ErrVersion, Detail: fmt.Sprintf("version %d", v)}
	}
	switch p := h.Proc(); p {
	case ProcDone:
		return Message{b: b[:HeaderLen:HeaderLen]}, HeaderLen, nil
	case ProcError:
		if len(b) < errCode+4 {
			return Message{}, 0, truncated(op, "rdma_err", errCode, errCode+4, len(b))
		}
		n := errCode + 4
		switch c := ErrCode(binary.BigEndian.Uint32(b[errCode:])); c {
		case ErrVers:
			n = errHigh + 4
			if len(b) < n {
				return Message{}, 0, truncated(op, "rdma_vers_low, rdma_vers_high", errLow, n, len(b))
			}
		case ErrChunk:
		default:
			return Message{}, 0, &Error{Op: op, Field: "rdma_err", Offset: errCode, Err: ErrErrorCode, Detail: fmt.Sprintf("code %d", uint32(c))}
		}
		return Message{b: b[:n:n]}, n, nil
	case ProcMsg, ProcNoMsg, ProcMsgP:
		lists := HeaderLen
		if p == ProcMsgP {
			lists = msgpThresh + 4
			if len(b) < lists {
				return Message{}, 0, truncated(op, "rdma_align, rdma_thresh", msgpAlign, lists, len(b))
			}
		}
		n, err := walk(b, lists, nil)
		if err != nil {
			return Message{}, 0, err
		}
		return Message{b: b[:n:n], lists: lists}, n, nil
	default:
		return Message{}, 0, &Error{Op: op, Field: "rdma_proc", Offset: hdrProc, Err: ErrProc, Detail: fmt.Sprintf("type %d", uint32(p))}
	}
}

// walk checks the chunk lists of b from off and returns where they end;
// it hands each segment to yield, when not nil, and stops (returning 0,
// nil) when yield does.
func walk(b []byte, off int, yield func(SegmentRef) bool) (int, error) {
	const op = "parse header"
	word := func(field string) (uint32, error) {
		if len(b)-off < 4 {
			return 0, truncated(op, field, off, off+4, len(b))
		}
		v := binary.BigEndian.Uint32(b[off:])
		off += 4
		return v, nil
	}
	present := func(field string) (bool, error) {
		at := off
		v, err := word(field)
		if err != nil {
			return false, err
		}
		if v > 1 {
			return false, &Error{Op: op, Field: field, Offset: at, Err: ErrDiscriminator, Detail: fmt.Sprintf("%d", v)}
		}
		return v == 1, nil
	}
	// The read list.
	for i := 0; ; i++ {
		more, err := present("read list entry")
		if err != nil {
			return 0, err
		}
		if !more {
			break
		}
		if len(b)-off < 4+SegmentLen {
			return 0, truncated(op, "read segment", off, off+4+SegmentLen, len(b))
		}
		pos := binary.BigEndian.Uint32(b[off:])
		if pos&3 != 0 {
			return 0, &Error{Op: op, Field: "read segment position", Offset: off, Err: ErrPosition, Detail: fmt.Sprintf("position %d", pos)}
		}
		off += 4
		if yield != nil && !yield(SegmentRef{List: ListRead, Index: i, Position: pos, Off: off, Segment: Segment(b[off : off+SegmentLen : off+SegmentLen])}) {
			return 0, nil
		}
		off += SegmentLen
	}
	// The write list, then the reply chunk: counted segments.
	chunk := func(list List, c int) error {
		at := off
		count, err := word("segment count")
		if err != nil {
			return err
		}
		if need := uint64(count) * SegmentLen; need > uint64(len(b)-off) {
			if count > uint32(len(b)) {
				return &Error{Op: op, Field: "segment count", Offset: at, Err: ErrSegmentCount, Detail: fmt.Sprintf("%d segments in a %d-byte message", count, len(b))}
			}
			return truncated(op, fmt.Sprintf("%s segments", list), off, off+int(need), len(b))
		}
		for i := range int(count) {
			if yield != nil && !yield(SegmentRef{List: list, Chunk: c, Index: i, Off: off, Segment: Segment(b[off : off+SegmentLen : off+SegmentLen])}) {
				return errStop
			}
			off += SegmentLen
		}
		return nil
	}
	for c := 0; ; c++ {
		more, err := present("write list entry")
		if err != nil {
			return 0, err
		}
		if !more {
			break
		}
		if err := chunk(ListWrite, c); err != nil {
			if err == errStop {
				return 0, nil
			}
			return 0, err
		}
	}
	more, err := present("reply chunk")
	if err != nil {
		return 0, err
	}
	if more {
		if err := chunk(ListReply, 0); err != nil {
			if err == errStop {
				return 0, nil
			}
			return 0, err
		}
	}
	return off, nil
}

// errStop is walk's own: a yield stopped it.
var errStop = errors.New("rpcrdma: walk stopped")

// Header is the message's fixed header.
func (m Message) Header() Header { return Header(m.b) }

// Bytes are the transport header's bytes (Len of them).
func (m Message) Bytes() []byte { return m.b }

// Len is the transport header's length.
func (m Message) Len() int { return len(m.b) }

func (m Message) XID() uint32     { return Header(m.b).XID() }
func (m Message) Credits() uint32 { return Header(m.b).Credits() }
func (m Message) Proc() Proc      { return Header(m.b).Proc() }

// Align and Thresh are an RDMA_MSGP's rdma_align and rdma_thresh (0 for
// the others).
func (m Message) Align() uint32 {
	if m.Proc() != ProcMsgP {
		return 0
	}
	return binary.BigEndian.Uint32(m.b[msgpAlign:])
}

func (m Message) Thresh() uint32 {
	if m.Proc() != ProcMsgP {
		return 0
	}
	return binary.BigEndian.Uint32(m.b[msgpThresh:])
}

// Err is an RDMA_ERROR's code, and for ERR_VERS the versions the
// responder speaks (0 for the other messages).
func (m Message) Err() (code ErrCode, low, high uint32) {
	if m.Proc() != ProcError {
		return 0, 0, 0
	}
	code = ErrCode(binary.BigEndian.Uint32(m.b[errCode:]))
	if code == ErrVers {
		low, high = binary.BigEndian.Uint32(m.b[errLow:]), binary.BigEndian.Uint32(m.b[errHigh:])
	}
	return code, low, high
}

// Segments are the message's segments in the order they lie: the read
// list's, each write chunk's, the reply chunk's. Nothing for the
// messages without chunk lists.
func (m Message) Segments() iter.Seq[SegmentRef] {
	return func(yield func(SegmentRef) bool) {
		if m.lists == 0 {
			return
		}
		_, _ = walk(m.b, m.lists, yield) // Parse checked it
	}
}

// HasChunks reports whether any chunk list of m is not empty.
func (m Message) HasChunks() bool {
	if m.lists == 0 {
		return false
	}
	return len(m.b) > m.lists+12 // three absent discriminators are 12 bytes
}

// Fields reads every field of m (allocating its lists).
func (m Message) Fields() MessageFields {
	h := m.Header()
	f := MessageFields{XID: h.XID(), Vers: h.Vers(), Credits: h.Credits(), Proc: h.Proc(), Align: m.Align(), Thresh: m.Thresh()}
	f.Err, f.VersLow, f.VersHigh = m.Err()
	for s := range m.Segments() {
		switch s.List {
		case ListRead:
			f.Reads = append(f.Reads, ReadSegmentFields{Position: s.Position, SegmentFields: s.Segment.Fields()})
		case ListWrite:
			for len(f.Writes) <= s.Chunk {
				f.Writes = append(f.Writes, []SegmentFields{})
			}
			f.Writes[s.Chunk] = append(f.Writes[s.Chunk], s.Segment.Fields())
		case ListReply:
			if f.Reply == nil {
				f.Reply = []SegmentFields{}
			}
			f.Reply = append(f.Reply, s.Segment.Fields())
		}
	}
	if m.lists != 0 {
		// Chunks of zero segments yield nothing: read the counts.
		f.Writes, f.Reply = m.chunkShapes(f.Writes, f.Reply)
	}
	return f
}

// chunkShapes fills in the write chunks and reply chunk of no segments,
// which Segments does not yield.
func (m Message) chunkShapes(writes [][]SegmentFields, reply []SegmentFields) ([][]SegmentFields, []SegmentFields) {
	off := m.lists
	for binary.BigEndian.Uint32(m.b[off:]) == 1 {
		off += 4 + 4 + SegmentLen
	}
	off += 4
	c := 0
	for binary.BigEndian.Uint32(m.b[off:]) == 1 {
		n := int(binary.BigEndian.Uint32(m.b[off+4:]))
		if c >= len(writes) {
			writes = append(writes, []SegmentFields{})
		}
		off += 8 + n*SegmentLen
		c++
	}
	off += 4
	if binary.BigEndian.Uint32(m.b[off:]) == 1 && reply == nil {
		reply = []SegmentFields{}
	}
	return writes, reply
}

// MessageFields are a transport header's values, for Append.
type MessageFields struct {
	XID, Vers, Credits uint32
	Proc               Proc
	// Align and Thresh: RDMA_MSGP only.
	Align, Thresh uint32
	// Reads, Writes and Reply: RDMA_MSG, RDMA_NOMSG and RDMA_MSGP only.
	// Each entry of Writes is a write chunk; Reply nil is no reply chunk.
	Reads  []ReadSegmentFields
	Writes [][]SegmentFields
	Reply  []SegmentFields
	// Err, and for ERR_VERS VersLow and VersHigh: RDMA_ERROR only.
	Err               ErrCode
	VersLow, VersHigh uint32
}

// Len is the length of the header f describes.
func (f *MessageFields) Len() int {
	n := HeaderLen
	switch f.Proc {
	case ProcError:
		n += 4
		if f.Err == ErrVers {
			n += 8
		}
		return n
	case ProcMsgP:
		n += 8
	case ProcMsg, ProcNoMsg:
	default:
		return n
	}
	n += len(f.Reads)*(4+4+SegmentLen) + 4
	for _, w := range f.Writes {
		n += 4 + 4 + len(w)*SegmentLen
	}
	n += 4
	if f.Reply != nil {
		n += 4 + len(f.Reply)*SegmentLen
	}
	return n + 4
}

// Append appends the header f describes to b, as the Linux kernel's
// rpcrdma_marshal_req (a call) and svc_rdma_sendto (a reply) write it.
func Append(b []byte, f *MessageFields) []byte {
	put := func(v uint32) { b = binary.BigEndian.AppendUint32(b, v) }
	seg := func(s *SegmentFields) {
		put(s.Handle)
		put(s.Length)
		b = binary.BigEndian.AppendUint64(b, s.Offset)
	}
	put(f.XID)
	put(f.Vers)
	put(f.Credits)
	put(uint32(f.Proc))
	switch f.Proc {
	case ProcError:
		put(uint32(f.Err))
		if f.Err == ErrVers {
			put(f.VersLow)
			put(f.VersHigh)
		}
		return b
	case ProcMsgP:
		put(f.Align)
		put(f.Thresh)
	case ProcMsg, ProcNoMsg:
	default:
		return b
	}
	for i := range f.Reads {
		put(1)
		put(f.Reads[i].Position)
		seg(&f.Reads[i].SegmentFields)
	}
	put(0)
	for _, w := range f.Writes {
		put(1)
		put(uint32(len(w)))
		for i := range w {
			seg(&w[i])
		}
	}
	put(0)
	if f.Reply != nil {
		put(1)
		put(uint32(len(f.Reply)))
		for i := range f.Reply {
			seg(&f.Reply[i])
		}
	} else {
		put(0)
	}
	return b
}
