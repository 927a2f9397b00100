//go:build linux

package udpconn

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// maxSegments is the most datagrams one GSO send carries: the kernel's
// UDP_MAX_SEGMENTS, 64 from Linux 4.18 (later kernels take 128).
const maxSegments = 64

// maxGSOBytes is the most transport bytes one GSO send carries: what one
// IPv4 datagram holds (65535 less the IP and UDP headers), for either
// family (IPv6 holds 20 more).
const maxGSOBytes = 0xffff - 28

// probeGSO reports whether the kernel knows UDP_SEGMENT. A route may still
// refuse it on a send (EIO; Conn.refuseGSO).
func probeGSO(fd int) error {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err
}

// putSegment writes a UDP_SEGMENT control message, the size of each
// datagram the kernel cuts from the send, at the start of ctl and returns
// its length.
func putSegment(ctl []byte, size int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&ctl[unix.SizeofCmsghdr])) = uint16(size)
	return unix.CmsgSpace(2)
}

// prepareWrites fills the write batch with msgs, from the first, as far as
// one system call goes: at most c.batch sends, each a datagram or, with
// gso, a run of packets the kernel cuts into datagrams (joins); b.segs
// says how many packets each send carries. It returns the sends. A
// message that cannot be sent ends the batch before it, with its error.
func (c *Conn) prepareWrites(msgs []roce.Message, gso bool) (sends int, bad error) {
	b := &c.wr
	packets := 0
	if need := 3 * min(len(msgs), c.batch*maxSegments); gso && len(b.iovs) < need {
		// Grown before any header points into it: at most once per
		// high-water mark.
		b.iovs = make([]unix.Iovec, need)
	}
	iov := 0
	for packets < len(msgs) && sends < c.batch {
		first, firstIov, total := packets, iov, 0
		for packets < len(msgs) {
			m := &msgs[packets]
			k := packets - first
			if k > 0 && !(gso && joins(&msgs[first], &msgs[packets-1], m, k, total)) {
				break
			}
			n, err := c.prepareWrite(m, k, b.iovs[iov:iov+3])
			if err != nil {
				bad = err
				break
			}
			iov += n
			total += m.Len()
			packets++
		}
		segs := packets - first
		if segs == 0 {
			break // msgs[first] is bad
		}
		h := &b.hdrs[sends].hdr
		nl := addrPortToSockaddr(&b.names[sends], msgs[first].Addr, c.v6)
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.names[sends])), Namelen: nl, Iov: &b.iovs[firstIov]}
		h.SetIovlen(iov - firstIov)
		cl := 0
		if segs > 1 {
			cl = putSegment(b.ctl[sends], msgs[first].Len())
		}
		if ecn := msgs[first].ECN & 3; ecn != 0 {
			cl += putECN(b.ctl[sends][cl:], ecn, c.v6)
		}
		if cl > 0 {
			h.Control = &b.ctl[sends][0]
			h.SetControllen(cl)
		}
		b.segs[sends] = segs
		sends++
		if bad != nil {
			break
		}
	}
	return sends, bad
}

// joins reports whether m, the k-th packet after first (prev the one
// before it, total the bytes from first to prev), may ride in first's GSO
// send: the same destination and ECN, no longer than first, after a
// packet as long as first (only the last may be shorter), within
// maxSegments and maxGSOBytes.
func joins(first, prev, m *roce.Message, k, total int) bool {
	seg := first.Len()
	return k < maxSegments && m.Addr == first.Addr && m.ECN&3 == first.ECN&3 &&
		prev.Len() == seg && m.Len() <= seg && total+m.Len() <= maxGSOBytes
}

// prepareWrite fills m's ICRC, over the headers the kernel will write for
// it as the k-th datagram of its send, and the iovecs that gather it into
// iov; it returns how many it used.
func (c *Conn) prepareWrite(m *roce.Message, k int, iov []unix.Iovec) (int, error) {
	b := &c.wr
	if !m.Sendable() {
		return 0, fmt.Errorf("%d bytes (headers %d, payload %d) are no RoCEv2 packet", m.N, m.Hdr, len(m.Payload))
	}
	hl, err := roce.PutIPUDPHeaders(b.hdr[:], c.local, m.Addr, m.Len(), m.ECN)
	if err != nil {
		return 0, err
	}
	if k > 0 && !c.v6 {
		if err := roce.SetIPv4ID(b.hdr[:hl], uint16(k)); err != nil {
			return 0, err
		}
	}
	niov := 1
	var crc uint32
	if m.Payload != nil {
		crc, err = roce.ICRCWithHeadersGather(b.hdr[:hl], m.Buf[:m.Hdr], m.Payload, m.Buf[m.Hdr:m.N])
		iov[0] = unix.Iovec{Base: &m.Buf[0]}
		iov[0].SetLen(m.Hdr)
		if len(m.Payload) > 0 {
			iov[niov] = unix.Iovec{Base: &m.Payload[0]}
			iov[niov].SetLen(len(m.Payload))
			niov++
		}
		iov[niov] = unix.Iovec{Base: &m.Buf[m.Hdr]}
		iov[niov].SetLen(m.N - m.Hdr)
		niov++
	} else {
		crc, err = roce.ICRCWithHeaders(b.hdr[:hl], m.Buf[:m.N])
		iov[0] = unix.Iovec{Base: &m.Buf[0]}
		iov[0].SetLen(m.N)
	}
	if err != nil {
		return 0, fmt.Errorf("ICRC: %w", err)
	}
	binary.LittleEndian.PutUint32(m.Buf[m.N-4:m.N], crc)
	return niov, nil
}

// refuseGSO turns GSO off for the conn after the kernel refused a GSO send
// to to with EIO: the route does not take it, and others may not either.
func (c *Conn) refuseGSO(to netip.AddrPort) {
	c.stats.TxGSOErrors.Add(1)
	if !c.gso.Swap(false) {
		return
	}
	why := fmt.Sprintf("a send to %v failed with EIO: the route takes no segmentation offload", to)
	c.offMu.Lock()
	c.noGSO = why
	c.offMu.Unlock()
	c.log.Warn("udpconn: GSO turned off: one datagram per send from now on", "conn", c.local.String(), "why", why)
}
