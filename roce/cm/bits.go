package cm

import (
	"encoding/binary"
	"net/netip"
)

// CM fields are big-endian; bit 0 of a byte is its most significant bit, as
// the IBA tables number them.

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 it is the
// port's IP address: an IPv6 address, or an IPv4 one mapped as
// ::ffff:a.b.c.d.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of ip.
func GIDFromAddr(ip netip.Addr) GID {
	if ip.Is4() {
		ip = netip.AddrFrom16(ip.As16())
	}
	return GID(ip.As16())
}

// Addr returns the IP address a RoCEv2 GID stands for (IPv4-mapped GIDs
// give the IPv4 address).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string { return netip.AddrFrom16(g).String() }
