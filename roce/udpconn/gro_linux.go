//go:build linux

package udpconn

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// groBufLen is the size of each buffer a GRO conn reads into: the most the
// kernel coalesces (64 datagrams and 64 KiB of UDP payload), or one
// datagram.
const groBufLen = FrameLen

// lendEntries bounds the buffers one read of a lending conn takes (its
// frames stay the conn's while it waits): 512 KiB of the pool a conn.
const lendEntries = 8

// probeGRO asks the kernel to coalesce the socket's datagrams.
func probeGRO(fd int) error {
	return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
}

// groReader holds what one recvmmsg into the conn's GRO buffers brought,
// and how far ReadBatch has handed it out. Used by ReadBatch only.
type groReader struct {
	bufs []byte // groBufLen a read entry, as many as the largest batch read
	got  int    // entries the last recvmmsg filled
	next int    // the entry being handed out
	off  int    // where in it the next packet starts
	// Per entry, parsed once: the datagrams' length (the whole buffer for
	// one that the kernel did not coalesce), sender and ECN.
	seg  []int
	addr []netip.AddrPort
	ecn  []uint8
	// Per entry of a lending conn (ReadBatchLent): whether its buffer is a
	// frame of Options.Frames, and which; the conn holds one reference
	// to it until every packet in it was handed out, and each packet
	// lent holds one more. An entry without (none was free) reads into
	// the conn's own buffer, whose packets are handed out unlent.
	lent  []bool
	frame []uint64
	// shared says a packet of the entry was lent where it landed (its
	// frame then goes with it); an entry whose packets were all packed
	// keeps its frame for the next read.
	shared []bool
	// pack is the frame the datagrams of short reads are copied into and
	// lent from, filled up to packOff (packSet: the conn holds one
	// reference to it).
	pack    uint64
	packOff int
	packSet bool
}

// packMax is the longest read whose datagrams are packed: copied into the
// conn's pack frame one after another, rather than lent where they
// landed. A datagram the kernel did not coalesce arrives alone in a
// 64 KiB frame; lent there, a 1 KiB packet that a session keeps would hold
// 64 KiB of the pool until its far side completed it.
const packMax = 16 << 10

// packAlign aligns each packed datagram (a cache line).
const packAlign = 64

// groBuf is entry i's buffer: its lent frame, or the conn's own memory.
func (c *Conn) groBuf(i int) []byte {
	r := &c.groRd
	if r.lent != nil && r.lent[i] {
		return c.arena[r.frame[i] : r.frame[i]+groBufLen : r.frame[i]+groBufLen]
	}
	return r.bufs[i*groBufLen : (i+1)*groBufLen : (i+1)*groBufLen]
}

// dropEntry gives entry e's frame back: the conn's reference to it goes,
// and the entry takes another at its next read.
func (c *Conn) dropEntry(e int) {
	r := &c.groRd
	if r.lent[e] {
		c.frames.FreeFrame(r.frame[e])
		r.lent[e] = false
		c.stats.RxFramesHeld.Add(-1)
	}
	r.shared[e] = false
}

// doneEntry is called once every packet of entry e was handed out: a
// frame some of them were lent in goes with them; one whose packets were
// all packed (or dropped) stays the entry's for the next read.
func (c *Conn) doneEntry(e int) {
	if r := &c.groRd; r.shared != nil && r.shared[e] {
		c.dropEntry(e)
	}
}

// packInto copies p into the pack frame, taking a new one when p does
// not fit in what is left, and returns where it lies and the frame; ok
// is false when no frame is free.
func (c *Conn) packInto(p []byte) (q []byte, frame uint64, ok bool) {
	r := &c.groRd
	if !r.packSet || r.packOff+len(p) > groBufLen {
		if r.packSet {
			c.frames.FreeFrame(r.pack) // its packets hold it now
			r.packSet = false
			c.stats.RxFramesHeld.Add(-1)
		}
		off, ok := c.frames.AllocFrame()
		if !ok || off+groBufLen > uint64(len(c.arena)) {
			if ok {
				c.frames.FreeFrame(off)
			}
			return nil, 0, false
		}
		r.pack, r.packOff, r.packSet = off, 0, true
		c.stats.RxFramesHeld.Add(1)
	}
	at := int(r.pack) + r.packOff
	q = c.arena[at : at+len(p) : at+len(p)]
	copy(q, p)
	r.packOff += (len(p) + packAlign - 1) &^ (packAlign - 1)
	return q, r.pack, true
}

// releaseFrames drops the conn's references to the frames its entries
// and its pack hold: the packets not yet handed out are dropped. Called
// by the reader, or by Close once no read is under way (rdMu).
func (c *Conn) releaseFrames() {
	r := &c.groRd
	for e := range r.lent {
		c.dropEntry(e)
	}
	if r.packSet {
		c.frames.FreeFrame(r.pack)
		r.packSet = false
		c.stats.RxFramesHeld.Add(-1)
	}
	r.got, r.next, r.off = 0, 0, 0
}

// lendReadLen is how many buffers a lent read offers: twice what the
// last read filled, from one up to lendEntries, so an idle conn holds one
// or two frames of the pool, and a busy one up to lendEntries.
func (r *groReader) lendReadLen(n int) int {
	return min(n, max(1, 2*r.got))
}

// readGRO is readBatch for a GRO conn: what the last recvmmsg brought is
// handed out first; when all is, one recvmmsg fills up to n buffers. With
// lend (ReadBatchLent), each packet is left where it landed: in a frame
// of Options.Frames, lent, or in the conn's own buffer, not lent.
func (c *Conn) readGRO(msgs []roce.Message, n int, wait, lend bool) (int, error) {
	r := &c.groRd
	if c.closed.Load() {
		if lend {
			c.releaseFrames()
		}
		return 0, roce.ErrConnClosed
	}
	if r.next >= r.got {
		if got, err := c.recvGRO(n, wait, lend); err != nil || got == 0 {
			if lend && errors.Is(err, roce.ErrConnClosed) {
				c.releaseFrames()
			}
			return 0, err
		}
	}
	b := &c.rd
	out := 0
	for out < len(msgs) && r.next < r.got {
		e := r.next
		h := &b.hdrs[e]
		data := c.groBuf(e)[:h.n]
		if h.hdr.Flags&unix.MSG_TRUNC != 0 {
			c.stats.RxPackets.Add(1)
			c.stats.RxTruncated.Add(1)
			r.next, r.off = e+1, 0
			c.doneEntry(e)
			continue
		}
		end := min(r.off+r.seg[e], len(data))
		p := data[r.off:end:end]
		last := end == len(data)
		if r.off = end; last {
			r.next, r.off = e+1, 0
		}
		c.stats.RxPackets.Add(1)
		m := &msgs[out]
		inFrame, frame := false, uint64(0) // where a lent packet lies
		switch {
		case lend && r.lent[e] && len(data) <= packMax:
			if q, f, ok := c.packInto(p); ok {
				p, inFrame, frame = q, true, f
				c.stats.RxPacked.Add(1)
				break
			}
			fallthrough // no frame to pack into: lent where it landed
		case lend && r.lent[e]:
			inFrame, frame = true, r.frame[e]
			r.shared[e] = true
		}
		switch {
		case lend:
			m.Buf, m.N, m.Lent, m.Frame = p, len(p), false, 0
		default:
			m.Buf = m.Buf[:cap(m.Buf)]
			if len(p) > len(m.Buf) {
				c.stats.RxTruncated.Add(1)
				continue
			}
			m.N = copy(m.Buf, p)
		}
		m.Addr, m.ECN, m.ICRCChecked = r.addr[e], r.ecn[e], false
		ok := true
		if c.v6 {
			if ok = c.icrcOK(m); ok {
				m.ICRCChecked = true
			} else {
				c.stats.RxBadICRC.Add(1)
			}
		}
		if ok && inFrame {
			c.frames.RefFrame(frame)
			m.Lent, m.Frame = true, frame
			c.stats.RxLent.Add(1)
		}
		if last {
			c.doneEntry(e) // after the packet's own reference
		}
		if ok {
			out++
		}
	}
	return out, nil
}

// recvGRO reads up to n buffers with one recvmmsg (waiting for the first
// when wait) and parses each one's control messages. It returns how many
// it read: 0 and no error when it did not wait and nothing had arrived.
func (c *Conn) recvGRO(n int, wait, lend bool) (int, error) {
	r, b := &c.groRd, &c.rd
	r.got, r.next, r.off = 0, 0, 0
	if len(r.seg) < n {
		r.seg, r.addr, r.ecn = make([]int, n), make([]netip.AddrPort, n), make([]uint8, n)
	}
	own := !lend // the conn's own buffers are wanted
	if lend {
		if len(r.lent) < n {
			k := n - len(r.lent)
			r.lent, r.frame, r.shared = append(r.lent, make([]bool, k)...), append(r.frame, make([]uint64, k)...), append(r.shared, make([]bool, k)...)
		}
		for e := n; e < len(r.lent); e++ {
			c.dropEntry(e) // beyond this read: back to the pool
		}
		for i := range n {
			if r.lent[i] {
				continue
			}
			if off, ok := c.frames.AllocFrame(); !ok {
				c.stats.RxLendShort.Add(1)
				own = true
			} else if off+groBufLen > uint64(len(c.arena)) {
				c.frames.FreeFrame(off) // not in the arena: a misconfigured source
				c.stats.RxLendShort.Add(1)
				own = true
			} else {
				r.lent[i], r.frame[i] = true, off
				c.stats.RxFramesHeld.Add(1)
			}
		}
	}
	if own && len(r.bufs) < n*groBufLen {
		r.bufs = make([]byte, n*groBufLen)
	}
	for i := range n {
		buf := c.groBuf(i)
		b.iovs[i] = unix.Iovec{Base: &buf[0]}
		b.iovs[i].SetLen(groBufLen)
		h := &b.hdrs[i].hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.names[i])), Namelen: unix.SizeofSockaddrInet6,
			Iov: &b.iovs[i], Control: &b.ctl[i][0]}
		h.SetIovlen(1)
		h.SetControllen(ctlLen)
	}
	got, err := c.recv(n, wait)
	if err != nil || got == 0 {
		return 0, err
	}
	for i := range got {
		h := &b.hdrs[i]
		tos, seg := parseControl(b.ctl[i][:h.hdr.Controllen])
		if seg <= 0 {
			seg = groBufLen
		}
		r.seg[i], r.addr[i], r.ecn[i] = seg, sockaddrToAddrPort(&b.names[i]), tos&3
	}
	r.got = got
	return got, nil
}

// icrcOK verifies the ICRC of the IPv6 packet in m, over the headers it
// came with.
func (c *Conn) icrcOK(m *roce.Message) bool {
	b := &c.rd
	hl, err := roce.PutIPUDPHeaders(b.hdr[:], m.Addr, c.local, m.N, 0)
	var crc uint32
	if err == nil {
		crc, err = roce.ICRCWithHeaders(b.hdr[:hl], m.Buf[:m.N])
	}
	return err == nil && crc == binary.LittleEndian.Uint32(m.Buf[m.N-4:m.N])
}

// parseControl returns the traffic class / TOS byte and the GRO segment
// size (0: none) from received ancillary data.
func parseControl(ctl []byte) (tos uint8, seg int) {
	for len(ctl) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(ctl) {
			return tos, seg
		}
		data := ctl[unix.SizeofCmsghdr:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(*(*int32)(unsafe.Pointer(&data[0])))
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(data) >= 4:
			seg = int(*(*int32)(unsafe.Pointer(&data[0])))
		}
		ctl = ctl[min(cmsgAlign(l), len(ctl)):]
	}
	return tos, seg
}
