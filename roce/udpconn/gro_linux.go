//go:build linux

package udpconn

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// groBufLen is the size of each buffer a GRO conn reads into: the most the
// kernel coalesces (64 datagrams and 64 KiB of UDP payload), or one
// datagram.
const groBufLen = 1 << 16

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
}

// readGRO is readBatch for a GRO conn: what the last recvmmsg brought is
// handed out first; when all is, one recvmmsg fills up to n buffers.
func (c *Conn) readGRO(msgs []roce.Message, n int, wait bool) (int, error) {
	r := &c.groRd
	if r.next >= r.got {
		if got, err := c.recvGRO(n, wait); err != nil || got == 0 {
			return 0, err
		}
	} else if c.closed.Load() {
		return 0, roce.ErrConnClosed
	}
	b := &c.rd
	out := 0
	for out < len(msgs) && r.next < r.got {
		e := r.next
		h := &b.hdrs[e]
		data := r.bufs[e*groBufLen : e*groBufLen+int(h.n)]
		if h.hdr.Flags&unix.MSG_TRUNC != 0 {
			c.stats.RxPackets.Add(1)
			c.stats.RxTruncated.Add(1)
			r.next, r.off = e+1, 0
			continue
		}
		end := min(r.off+r.seg[e], len(data))
		p := data[r.off:end]
		if r.off = end; end == len(data) {
			r.next, r.off = e+1, 0
		}
		c.stats.RxPackets.Add(1)
		m := &msgs[out]
		m.Buf = m.Buf[:cap(m.Buf)]
		if len(p) > len(m.Buf) {
			c.stats.RxTruncated.Add(1)
			continue
		}
		m.N = copy(m.Buf, p)
		m.Addr, m.ECN, m.ICRCChecked = r.addr[e], r.ecn[e], false
		if c.v6 {
			if !c.icrcOK(m) {
				c.stats.RxBadICRC.Add(1)
				continue
			}
			m.ICRCChecked = true
		}
		out++
	}
	return out, nil
}

// recvGRO reads up to n buffers with one recvmmsg (waiting for the first
// when wait) and parses each one's control messages. It returns how many
// it read: 0 and no error when it did not wait and nothing had arrived.
func (c *Conn) recvGRO(n int, wait bool) (int, error) {
	r, b := &c.groRd, &c.rd
	r.got, r.next, r.off = 0, 0, 0
	if len(r.bufs) < n*groBufLen {
		r.bufs = make([]byte, n*groBufLen)
		r.seg, r.addr, r.ecn = make([]int, n), make([]netip.AddrPort, n), make([]uint8, n)
	}
	for i := range n {
		b.iovs[i] = unix.Iovec{Base: &r.bufs[i*groBufLen]}
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
