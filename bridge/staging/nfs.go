package staging

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// nfsConn is one RPC-over-RDMA version 1 connection (RFC 8166: NFS over
// RDMA) as its session relays it: the client (the requester) on the
// host side, the server (nfsd, the responder) on the far side.
//
//	client ──► call:  transport header (read list, write list,
//	                  reply chunk) + RPC call (RDMA_MSG; RDMA_NOMSG:
//	                  the call is in a position-zero read chunk)  ──► server
//	client ◄── reply: the header, write list and reply chunk echoed
//	                  with the bytes written + RPC reply (RDMA_MSG;
//	                  RDMA_NOMSG: the reply is in the reply chunk),
//	                  or RDMA_ERROR                               ◄── server
//	           the server's RDMA READs of read chunks and WRITEs of
//	           write and reply chunks pass by (one-sided: no message)
//
// Every message must be an RPC-over-RDMA version 1 header that
// rpcrdma.Parse accepts: anything else is refused, which ends the
// session. Calls are tracked by XID until their reply (or RDMA_ERROR).
// The RPC message itself is never written (RPCSEC_GSS signs it); only its
// first two words are read, to tell NFSv4.1 backchannel traffic (calls
// from the server, RFC 8167; their replies from the client, which carry
// no chunks) from the forward channel, as the Linux client does
// (rpcrdma_is_bcall). Credits are relayed as they are.
//
// The stats' vocabulary is NVMe's: commands are calls, by the way their
// chunks move data (read list only: host to controller; write list or
// reply chunk only: controller to host; both: bidirectional), descriptors
// are segments of a length above 0, completions are replies and
// RDMA_ERRORs; unknown_command_id is a reply for no outstanding XID, and
// reused_command_id a call whose XID is outstanding.
//
// Staging (session.Stager), where the server sits behind a verbs leg
// (Message.Staging): each segment of a length above 0 names a region,
// which the server READs (a read list's, including a position-zero
// chunk's: pulled first) or WRITEs (a write chunk's or the reply chunk's:
// pushed when the reply comes). Restage rewrites the segment's handle and
// offset in place (the length stays). The reply echoes those segments,
// each with the bytes the server wrote into it: they become
// Message.Pushed (only those are pushed), and the client's own handles
// and offsets are put back in the echo, in place, before the reply goes
// on. An RDMA_ERROR finishes its call's staging without a push. Remote
// invalidation is withdrawn at connect (ConnectData): the server never
// invalidates a gateway key; the client invalidates its own keys itself,
// as it does with any server that does not.
//
// What cannot be matched:
//   - a call whose XID is outstanding (an RPC client reuses an XID only
//     to retransmit, which RPC-over-RDMA does on a new connection only: the
//     Linux client drops the connection rather than retransmit on it, "to
//     maintain credits", xprt_rdma_send_request): relayed
//     and counted, the later call taking the XID; where the route stages
//     it is refused (the replies could not say whose staging they end);
//   - a reply for no outstanding call: counted and relayed as it is;
//   - a call the gateway cannot stage (a segment larger than the pool's
//     largest buffer, an exposure the far leg refuses): answered in the
//     server's place with RDMA_ERROR ERR_CHUNK for its XID (RFC 8166
//     section 4.5: the requester's chunks could not be processed), which
//     the Linux client fails that RPC with (EIO, rpcrdma_decode_error);
//     the connection goes on;
//   - backchannel messages with chunks, and replies with a read list
//     (RFC 5666's, gone from RFC 8166), where the route stages: refused
//     (the gateway stages the forward channel only).
type nfsConn struct {
	route string
	host  int // the session direction of the client's messages
	stats *Stats
	log   *slog.Logger

	mu sync.Mutex // guards the fields below: both directions call at once
	// calls are the calls sent and not answered, by XID.
	calls map[uint32]*nfsCall
	free  []*nfsCall // answered calls' records, for reuse
	// credits is the last credit grant of the server's (0: none seen).
	credits uint32
	// regions and pushed are Message's scratch (calls' and replies':
	// each direction's messages come one at a time).
	regions []session.Region
	pushed  []int
	// scratch holds a header that does not lie in the message's first
	// piece.
	scratch     []byte
	warned      [NumWhys]bool
	warnCredits bool
}

var _ session.Stager = (*nfsConn)(nil)

// nfsCall is an outstanding call.
type nfsCall struct {
	tag  uint64
	segs []nfsSegment // the staged segments, in the order of its regions
}

// nfsSegment is a staged segment of a call.
type nfsSegment struct {
	off    int    // where it lies in the call
	handle uint32 // the client's
	offset uint64
	length uint32
	rkey   uint32 // the staging's, once restaged
	addr   uint64
}

// nfsTag makes the session's tag of the call with XID xid, message
// number seq: unique on the connection, its low bits the XID.
func nfsTag(seq uint64, xid uint32) uint64 { return seq<<32 | uint64(xid) }

// RPC message types (RFC 5531), the second word of an RPC message.
const (
	rpcCall  = 0
	rpcReply = 1
)

// nfsCredits is what QueueOf takes a connection to have in flight each
// way at most: the Linux client's default slot table (RPCRDMA_DEF_SLOT_TABLE,
// 128: it never has more calls outstanding, whatever the server grants;
// nfsd grants 64 by default) and its backchannel's receives
// (RPCRDMA_BACKWARD_WRS, 32; nfsd keeps 2 for backchannel replies).
const (
	nfsSlots       = 128
	nfsBackchannel = 32
	nfsQueueDepth  = nfsSlots + nfsBackchannel
)

// maxNFSHeader bounds the bytes copied to parse a header that does not
// lie in a message's first piece: a header is sent inline, and no inline
// threshold is above 64 KiB (RPCRDMA_MAX_INLINE).
const maxNFSHeader = 64 << 10

func newNFSConn(o Options) *nfsConn {
	return &nfsConn{route: o.Route, host: o.Host, stats: o.Stats, log: o.Logger.With("protocol", config.ProtocolNFS),
		calls: map[uint32]*nfsCall{}}
}

// Message implements session.Protocol.
func (c *nfsConn) Message(m *session.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, n, err := c.headerLocked(m.Bytes)
	if err != nil {
		why, from := WhyMalformedCommand, "client"
		if m.Dir != c.host {
			why, from = WhyMalformedCompletion, "server"
		}
		c.stats.Errors[why].Add(1)
		return c.errorf("from the %s, not an RPC-over-RDMA version 1 message: %w", from, err)
	}
	if m.Dir == c.host {
		return c.fromClientLocked(m, h, n)
	}
	return c.fromServerLocked(m, h, n)
}

// headerLocked parses the transport header of p: in the first piece when
// it lies there (then its views are p's own bytes), else in a copy.
func (c *nfsConn) headerLocked(p session.Pieces) (rpcrdma.Message, int, error) {
	total := p.Len()
	if len(p) > 0 {
		h, n, err := rpcrdma.Parse(p[0])
		if err == nil || !errors.Is(err, rpcrdma.ErrTruncated) || len(p[0]) >= total {
			return h, n, err
		}
	}
	need := min(total, maxNFSHeader)
	if cap(c.scratch) < need {
		c.scratch = make([]byte, need)
	}
	b := c.scratch[:need]
	p.ReadAt(b, 0)
	return rpcrdma.Parse(b)
}

// msgType reads the RPC message type of an RDMA_MSG (the word after the
// XID of the message that follows the header at n); ok is false when
// there is none.
func msgType(p session.Pieces, n int) (t uint32, ok bool) {
	var w [4]byte
	if k, _ := p.ReadAt(w[:], int64(n+4)); k != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(w[:]), true
}

// fromClientLocked takes a message from the client: a call, a
// backchannel reply, or RDMA_DONE / RDMA_ERROR (relayed).
func (c *nfsConn) fromClientLocked(m *session.Message, h rpcrdma.Message, n int) error {
	if !h.Proc().HasChunks() {
		return nil // RDMA_DONE (RFC 5666), or an RDMA_ERROR answering a backchannel call
	}
	if h.Proc() != rpcrdma.ProcNoMsg {
		t, ok := msgType(m.Bytes, n)
		if !ok {
			c.stats.Errors[WhyMalformedCommand].Add(1)
			return c.errorf("from the client, a %v of XID %#x with no RPC message after its %d-byte header", h.Proc(), h.XID(), n)
		}
		if t == rpcReply {
			return c.backchannelLocked(m, h, "reply from the client")
		}
	}
	xid := h.XID()
	dir := DataNone
	for s := range h.Segments() {
		if s.List == rpcrdma.ListRead {
			dir |= DataHostToController
		} else {
			dir |= DataControllerToHost
		}
		if l := s.Segment.Length(); l > 0 {
			c.stats.Descriptors.Add(1)
			c.stats.DescribedBytes.Add(uint64(l))
		}
	}
	c.stats.Commands[dir].Add(1)
	if old, dup := c.calls[xid]; dup {
		if m.Staging {
			c.stats.Errors[WhyReusedCommandID].Add(1)
			return c.errorf("a call of XID %#x, which is outstanding already: the gateway stages on this route, and could not match the replies", xid)
		}
		c.noteLocked(WhyReusedCommandID, "a call whose XID is outstanding: relayed, its reply taken for the later call", "xid", xid)
		c.putLocked(old)
	}
	call := c.getLocked()
	call.tag = nfsTag(m.Seq, xid)
	m.Tag = call.tag
	if m.Staging {
		c.regions = c.regions[:0]
		for s := range h.Segments() {
			l := s.Segment.Length()
			if l == 0 {
				continue
			}
			c.regions = append(c.regions, session.Region{Remote: s.Segment.Offset(), RKey: s.Segment.Handle(), Len: int(l), Write: s.List != rpcrdma.ListRead})
			call.segs = append(call.segs, nfsSegment{off: s.Off, handle: s.Segment.Handle(), offset: s.Segment.Offset(), length: l})
		}
		if len(c.regions) > 0 {
			m.Stage = c.regions
		}
	}
	c.calls[xid] = call
	return nil
}

// backchannelLocked takes an NFSv4.1 backchannel message (RFC 8167): a
// call from the server, a reply from the client. They carry no chunks;
// where the route stages, one that does is refused.
func (c *nfsConn) backchannelLocked(m *session.Message, h rpcrdma.Message, what string) error {
	if m.Staging && h.HasChunks() {
		c.stats.Errors[WhyUnstageable].Add(1)
		return c.errorf("a backchannel %s (XID %#x) with chunks: the gateway stages the forward channel only", what, h.XID())
	}
	return nil
}

// fromServerLocked takes a message from the server: a reply, an
// RDMA_ERROR, or a backchannel call.
func (c *nfsConn) fromServerLocked(m *session.Message, h rpcrdma.Message, n int) error {
	switch h.Proc() {
	case rpcrdma.ProcDone:
		return nil // a requester's message: relayed, the client's stack judges it
	case rpcrdma.ProcMsg, rpcrdma.ProcMsgP:
		t, ok := msgType(m.Bytes, n)
		if !ok {
			c.stats.Errors[WhyMalformedCompletion].Add(1)
			return c.errorf("from the server, a %v of XID %#x with no RPC message after its %d-byte header", h.Proc(), h.XID(), n)
		}
		if t == rpcCall {
			return c.backchannelLocked(m, h, "call from the server")
		}
	}
	c.stats.Completions.Add(1)
	c.creditsLocked(h.Credits())
	xid := h.XID()
	call, ok := c.calls[xid]
	if !ok {
		c.noteLocked(WhyUnknownCommandID, "a reply for no call outstanding: relayed", "xid", xid, "type", h.Proc().String())
		return nil
	}
	delete(c.calls, xid)
	defer c.putLocked(call)
	if len(call.segs) == 0 {
		return nil
	}
	m.Finish, m.Finishes = call.tag, true
	if h.Proc() == rpcrdma.ProcError {
		return nil // nothing was written that the client takes
	}
	c.pushed = c.pushed[:0]
	for range call.segs {
		c.pushed = append(c.pushed, 0)
	}
	var raw [rpcrdma.SegmentLen]byte
	for s := range h.Segments() {
		if s.List == rpcrdma.ListRead {
			c.stats.Errors[WhyUnstageable].Add(1)
			return c.errorf("the reply to XID %#x has a read list (RFC 5666 reply chunks): the gateway cannot stage it", xid)
		}
		i := call.match(s.Segment)
		if i < 0 {
			if s.Segment.Length() == 0 {
				continue // an unused segment the gateway did not stage
			}
			return c.errorf("the reply to XID %#x says the server wrote %d bytes to %#x with key %#x, which the gateway did not give it", xid, s.Segment.Length(), s.Segment.Offset(), s.Segment.Handle())
		}
		g := &call.segs[i]
		into := s.Segment.Offset() - g.addr
		c.pushed[i] = int(into + uint64(s.Segment.Length())) // above the region: the session refuses it
		seg := rpcrdma.Segment(raw[:])
		seg.SetHandle(g.handle)
		seg.SetLength(s.Segment.Length())
		seg.SetOffset(g.offset + into)
		if _, err := m.Bytes.WriteAt(raw[:], int64(s.Off)); err != nil {
			return c.errorf("put the client's segment back in the reply to XID %#x: %w", xid, err)
		}
	}
	m.Push, m.Pushed = true, c.pushed
	return nil
}

// match is the index of the staged segment whose staging s names (its
// key, an offset within it), or -1.
func (call *nfsCall) match(s rpcrdma.Segment) int {
	k, off := s.Handle(), s.Offset()
	for i, g := range call.segs {
		if g.rkey == k && g.rkey != 0 && off >= g.addr && off-g.addr <= uint64(g.length) {
			return i
		}
	}
	return -1
}

// creditsLocked takes the server's credit grant, and says once when it
// is more than the receives the gateway keeps for the connection.
func (c *nfsConn) creditsLocked(n uint32) {
	c.credits = n
	if n > nfsSlots && !c.warnCredits {
		c.warnCredits = true
		c.log.Warn("the server grants more credits than the receives the gateway keeps for a connection: raise the verbs legs' receives, or a client with as many calls in flight meets RNR NAKs (RPC-over-RDMA never expects one)",
			"credits", n, "receives", nfsQueueDepth)
	}
}

func (c *nfsConn) getLocked() *nfsCall {
	if k := len(c.free); k > 0 {
		call := c.free[k-1]
		c.free = c.free[:k-1]
		return call
	}
	return &nfsCall{}
}

// putLocked keeps an answered call's record for reuse (a connection's
// worth at most).
func (c *nfsConn) putLocked(call *nfsCall) {
	if len(c.free) < nfsQueueDepth {
		call.segs = call.segs[:0]
		c.free = append(c.free, call)
	}
}

// Restage implements session.Stager: region i's segment now names
// staging at addr with rkey (its length unchanged).
func (c *nfsConn) Restage(dir int, tag uint64, b session.Pieces, i int, addr uint64, rkey uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	call, ok := c.calls[uint32(tag)]
	if !ok || call.tag != tag || i >= len(call.segs) {
		return fmt.Errorf("nfs: restage region %d of XID %#x: not a staged call", i, uint32(tag))
	}
	g := &call.segs[i]
	var raw [rpcrdma.SegmentLen]byte
	seg := rpcrdma.Segment(raw[:])
	seg.SetHandle(rkey)
	seg.SetLength(g.length)
	seg.SetOffset(addr)
	if _, err := b.WriteAt(raw[:], int64(g.off)); err != nil {
		return fmt.Errorf("nfs: restage region %d of XID %#x: the segment at %d is past the call: %w", i, uint32(tag), g.off, err)
	}
	g.rkey, g.addr = rkey, addr
	return nil
}

// Unstaged implements session.Stager: the call could not be staged; the
// client gets RDMA_ERROR ERR_CHUNK for its XID from the gateway.
func (c *nfsConn) Unstaged(dir int, tag uint64, why error) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	xid := uint32(tag)
	if call, ok := c.calls[xid]; ok && call.tag == tag {
		delete(c.calls, xid)
		c.putLocked(call)
	}
	c.stats.Errors[WhyUnstageable].Add(1)
	c.stats.Answered.Add(1)
	c.log.Warn("a call could not be staged: the client gets RDMA_ERROR ERR_CHUNK from the gateway", "xid", xid, "why", why)
	// The credit field grants as the server last did (a client takes
	// any reply's grant as its window; 1 before the server said).
	return rpcrdma.Append(nil, &rpcrdma.MessageFields{XID: xid, Vers: rpcrdma.Version, Credits: max(c.credits, 1), Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk})
}

// Sent implements session.Protocol: a call the server never got (its
// SEND failed) is no longer outstanding.
func (c *nfsConn) Sent(dir int, tag uint64, status transport.Status) {
	if dir != c.host || status == transport.StatusSuccess {
		return
	}
	c.mu.Lock()
	if call, ok := c.calls[uint32(tag)]; ok && call.tag == tag {
		delete(c.calls, uint32(tag))
		c.putLocked(call)
	}
	c.mu.Unlock()
}

// noteLocked counts why and logs its first occurrence in the session.
func (c *nfsConn) noteLocked(why Why, msg string, args ...any) {
	noteOnce(c.stats, &c.warned, c.log, "connection", why, msg, args...)
}

// errorf is an error of the route's connection.
func (c *nfsConn) errorf(format string, args ...any) error {
	return fmt.Errorf("route %q: nfs: "+format, append([]any{c.route}, args...)...)
}

// nfsQueue is an RPC-over-RDMA connection's queue. Its depth is not in
// the connect request (credits travel in every message), so it is what
// the Linux client has in flight at most by default, calls and
// backchannel messages (nfsQueueDepth): each side of the gateway keeps that
// many receives, as the peers do (the Linux client posts credits plus
// its backchannel's; RPC-over-RDMA sets rnr_retry_count 0, so a missing
// receive fails the connection). The server's SENDs, replies and
// backchannel calls, are at most the client's inline receive size, which
// RFC 8797 private data says (the client posts receives of that size;
// it provides a reply chunk for any reply that may not fit), and the
// client's, calls and backchannel replies, at most its inline send size;
// without RFC 8797 data the legs' own receive sizes stand.
func nfsQueue(privateData []byte) Queue {
	q := Queue{Depth: nfsQueueDepth}
	if p, _, err := rpcrdma.ParseConnectPrivate(privateData); err == nil {
		q.ResponseSize, q.RequestSize = p.RecvSize(), p.SendSize()
	}
	return q
}

// nfsConnectData is the client's connect request toward a server the
// gateway stages for (toTarget, stages) with RPCRDMA_CMP_F_SND_W_INV_OK
// cleared, in a copy: the server would otherwise invalidate the key a
// call names with its reply (svc_rdma_get_inv_rkey), which is the
// gateway's staging key. Everything else passes as it is: private data
// that is not RFC 8797's (it is optional), and the server's accept (its
// inline sizes concern the client; its flags offer nothing).
func nfsConnectData(toTarget, stages bool, b []byte) []byte {
	if !toTarget || !stages {
		return b
	}
	return rpcrdma.WithoutSendWithInvalidate(b)
}
