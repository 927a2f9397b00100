package cm

import (
	"encoding/binary"
	"net/netip"
)

// IPCMHeader is the RDMA IP CM header that rdma_cm puts at the start of a
// REQ's private data for the TCP and UDP port spaces (Linux cma.c,
// struct cma_hdr and cma_format_hdr):
//
//	 0 CM version (0) | IP version (4 bits), reserved (4) | Source Port (16)
//	 4 Source IP (16 bytes; IPv4 in the last four)
//	20 Destination IP (16 bytes; IPv4 in the last four)
//
// Source is the active side (the connecting client), destination the
// listener. The application's own private data follows the header.
type IPCMHeader []byte

// IP CM header layout.
const (
	IPCMHeaderLen = 36
	IPCMVersion   = 0

	// REQIPCMPrivateDataLen is what is left of a REQ's private data for
	// the application after the IP CM header (rdma_connect's limit).
	REQIPCMPrivateDataLen = REQPrivateDataLen - IPCMHeaderLen

	ipcmVersion   = 0
	ipcmIPVersion = 1
	ipcmPort      = 2
	ipcmSrc       = 4
	ipcmDst       = 20
)

// IPCMHeaderFields holds the fields of an IP CM header.
type IPCMHeaderFields struct {
	Version   uint8 // IPCMVersion
	IPVersion uint8 // 4 or 6
	SrcPort   uint16
	Src, Dst  netip.Addr
}

// IsValid reports whether h is long enough to hold an IP CM header.
func (h IPCMHeader) IsValid() bool { return len(h) >= IPCMHeaderLen }

// Version returns the CM version byte.
func (h IPCMHeader) Version() uint8 { return h[ipcmVersion] }

// IPVersion returns the IP version (4 or 6).
func (h IPCMHeader) IPVersion() uint8 { return h[ipcmIPVersion] >> 4 }

// SrcPort returns the active side's port.
func (h IPCMHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(h[ipcmPort:]) }

func (h IPCMHeader) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+12 : off+16]))
	}
	return netip.AddrFrom16([16]byte(h[off : off+16]))
}

// Src returns the active side's IP address.
func (h IPCMHeader) Src() netip.Addr { return h.addr(ipcmSrc) }

// Dst returns the listener's IP address.
func (h IPCMHeader) Dst() netip.Addr { return h.addr(ipcmDst) }

// Fields returns all fields of h.
func (h IPCMHeader) Fields() IPCMHeaderFields {
	return IPCMHeaderFields{Version: h.Version(), IPVersion: h.IPVersion(), SrcPort: h.SrcPort(), Src: h.Src(), Dst: h.Dst()}
}

// Encode writes every byte of the header from f. IPv4 addresses go in the
// last four bytes of their field (after 12 zero bytes), as rdma_cm writes
// them; IPv6 ones fill it.
func (h IPCMHeader) Encode(f *IPCMHeaderFields) {
	h[ipcmVersion] = f.Version
	h[ipcmIPVersion] = f.IPVersion << 4
	binary.BigEndian.PutUint16(h[ipcmPort:], f.SrcPort)
	putAddr := func(b []byte, a netip.Addr) {
		clear(b[:16])
		if a.Is4() {
			a4 := a.As4()
			copy(b[12:16], a4[:])
		} else if a.IsValid() {
			a16 := a.As16()
			copy(b, a16[:])
		}
	}
	putAddr(h[ipcmSrc:], f.Src)
	putAddr(h[ipcmDst:], f.Dst)
}

// ParseIPCMHeader returns the IP CM header at the start of b (a REQ's
// private data) and its length. It checks the version (0) and the IP
// version (4 or 6).
func ParseIPCMHeader(b []byte) (IPCMHeader, int, error) {
	if len(b) < IPCMHeaderLen {
		return nil, 0, truncated("RDMA IP CM header", IPCMHeaderLen, len(b))
	}
	h := IPCMHeader(b[:IPCMHeaderLen])
	if h.Version() != IPCMVersion {
		return nil, 0, bad("RDMA IP CM version", ErrBadIPCM, uint64(h.Version()))
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, 0, bad("RDMA IP CM IP version", ErrBadIPCM, uint64(v))
	}
	return h, IPCMHeaderLen, nil
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106
	PortSpaceUDP   PortSpace = 0x0111
	PortSpaceIB    PortSpace = 0x013f
)

// ServiceID returns the IB service ID rdma_cm uses for port in port space
// ps: 0x0000000001060000 | port for TCP (cma.c, cma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// ParseServiceID splits an rdma_cm service ID into its port space and port;
// ok is false when the ID is not of the RDMA IP form (upper 32 bits zero).
func ParseServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>32 != 0 {
		return 0, 0, false
	}
	return PortSpace(id >> 16), uint16(id), true
}
