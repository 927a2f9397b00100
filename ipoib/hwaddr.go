package ipoib

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/rbridge/rbridge/ibv"
)

// HwAddr is the 20-byte hardware address of an IPoIB interface
// (INFINIBAND_ALEN, include/uapi/linux/if_infiniband.h): what `ip link`
// prints after link/infiniband, what /sys/class/net/IF/address holds and
// what a neighbour entry's lladdr carries. The kernel builds it in
// drivers/infiniband/ulp/ipoib: the QPN of the interface's UD QP in bytes
// 1-3 (ipoib_dev_init), the port's GID at index 0 in bytes 4-19
// (ipoib_parent_init), and IPOIB_FLAGS_RC in byte 0 when connected mode is
// possible (ipoib_cm_dev_init).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|U|   Resv6   |                      QPN                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                 GID: subnet prefix (64 bits)                  +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+               GID: interface ID, the port GUID                +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// R is IPOIB_FLAGS_RC (the interface accepts connected mode), U is
// IPOIB_FLAGS_UC (defined by the kernel, never set: "We don't support UC
// connections"). A multicast address (the broadcast address among them)
// has QPN 0xFFFFFF and a multicast GID (MGID) in place of the port's GID.
type HwAddr []byte

// HwAddrLen is the length of an IPoIB hardware address (INFINIBAND_ALEN).
const HwAddrLen = 20

const (
	hwFlags = 0
	hwQPN   = 1
	hwGID   = 4
)

// MulticastQPN is the QPN of every multicast address: IB_MULTICAST_QPN,
// 0xFFFFFF in bytes 1-3 of the broadcast address and of ip_ib_mc_map's.
const MulticastQPN = 0xffffff

// Flags are the bits of an IPoIB hardware address's first byte.
type Flags uint8

// The flag bits, as drivers/infiniband/ulp/ipoib/ipoib.h names them.
const (
	// FlagRC is IPOIB_FLAGS_RC: the interface's driver can take connected
	// mode (ipoib_cm_dev_init sets it; IPOIB_CM_SUPPORTED tests it, on the
	// interface's own address before `echo connected > mode` is accepted
	// and on a neighbour's before a connection to it is tried).
	FlagRC Flags = 0x80
	// FlagUC is IPOIB_FLAGS_UC, reserved for UC connections, which Linux
	// does not implement.
	FlagUC Flags = 0x40
)

func (f Flags) String() string {
	var parts []string
	if f&FlagRC != 0 {
		parts = append(parts, "RC")
	}
	if f&FlagUC != 0 {
		parts = append(parts, "UC")
	}
	if rest := f &^ (FlagRC | FlagUC); rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%02x", uint8(rest)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// MarshalText formats f as String does.
func (f Flags) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// HwAddrFields holds the fields of an IPoIB hardware address.
type HwAddrFields struct {
	Flags Flags
	QPN   uint32 // 24 bits
	GID   ibv.GID
}

// IsValid reports whether a is long enough to hold an IPoIB hardware
// address. It is the precondition of every getter and setter.
func (a HwAddr) IsValid() bool { return len(a) >= HwAddrLen }

// Flags returns the flag byte.
func (a HwAddr) Flags() Flags { return Flags(a[hwFlags]) }

// QPN returns the 24-bit queue pair number (the kernel's IPOIB_QPN).
func (a HwAddr) QPN() uint32 {
	return uint32(a[hwQPN])<<16 | uint32(a[hwQPN+1])<<8 | uint32(a[hwQPN+2])
}

// GID returns the 16-byte GID: the port's for a unicast address, the
// multicast group's (see MGID) for a multicast one.
func (a HwAddr) GID() ibv.GID { return ibv.GID(a[hwGID : hwGID+16]) }

// MGID returns a view of the GID bytes, for a multicast address.
func (a HwAddr) MGID() MGID { return MGID(a[hwGID : hwGID+16]) }

// SubnetPrefix returns the GID's upper 64 bits (0xfe80000000000000 until
// the subnet manager sets another).
func (a HwAddr) SubnetPrefix() uint64 { return binary.BigEndian.Uint64(a[hwGID:]) }

// GUID returns the GID's lower 64 bits: the port GUID of a unicast
// address.
func (a HwAddr) GUID() uint64 { return binary.BigEndian.Uint64(a[hwGID+8:]) }

// IsMulticast reports whether a is a multicast address: QPN 0xFFFFFF and a
// GID whose first byte is 0xFF.
func (a HwAddr) IsMulticast() bool { return a.QPN() == MulticastQPN && a[hwGID] == 0xff }

// LinkLocal returns the IPv6 link-local address the kernel gives an
// interface with hardware address a: fe80::/64 and the port GUID with bit
// 0x02 of its first byte set (addrconf_ifid_infiniband, net/ipv6/addrconf.c).
func (a HwAddr) LinkLocal() netip.Addr {
	var ip [16]byte
	ip[0], ip[1] = 0xfe, 0x80
	copy(ip[8:], a[hwGID+8:hwGID+16])
	ip[8] |= 0x02
	return netip.AddrFrom16(ip)
}

// SetFlags sets the flag byte.
func (a HwAddr) SetFlags(f Flags) { a[hwFlags] = byte(f) }

// SetQPN sets the 24-bit QPN (qpn modulo 2^24).
func (a HwAddr) SetQPN(qpn uint32) {
	a[hwQPN], a[hwQPN+1], a[hwQPN+2] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
}

// SetGID sets the GID.
func (a HwAddr) SetGID(g ibv.GID) { copy(a[hwGID:hwGID+16], g[:]) }

// Fields returns all fields of a.
func (a HwAddr) Fields() HwAddrFields {
	return HwAddrFields{Flags: a.Flags(), QPN: a.QPN(), GID: a.GID()}
}

// Encode writes every byte of the address from f.
func (a HwAddr) Encode(f *HwAddrFields) {
	a.SetFlags(f.Flags)
	a.SetQPN(f.QPN)
	a.SetGID(f.GID)
}

// String formats the first 20 bytes of a as the kernel and `ip link` do:
// lower-case hex bytes joined by colons. An address of another length is
// formatted whole, the same way.
func (a HwAddr) String() string {
	if len(a) > HwAddrLen {
		a = a[:HwAddrLen]
	}
	return net.HardwareAddr(a).String()
}

// MarshalText formats a as String does.
func (a HwAddr) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText parses the colon form.
func (a *HwAddr) UnmarshalText(b []byte) error {
	v, err := ParseHwAddrText(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// AppendHwAddr appends the 20-byte address of f to dst.
func AppendHwAddr(dst []byte, f *HwAddrFields) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, HwAddrLen)...)
	HwAddr(dst[n:]).Encode(f)
	return dst
}

// ParseHwAddr returns the address at the start of b, a view of b's first
// 20 bytes, and 20. A shorter b is an error matching ErrTruncated.
func ParseHwAddr(b []byte) (HwAddr, int, error) {
	if len(b) < HwAddrLen {
		return nil, 0, fmt.Errorf("parse ipoib hardware address: need %d bytes, have %d: %w", HwAddrLen, len(b), ErrTruncated)
	}
	return HwAddr(b[:HwAddrLen]), HwAddrLen, nil
}

// ParseHwAddrText parses the text form `ip link` prints: twenty
// hexadecimal bytes joined by colons, either case
// ("80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a"). It
// returns a new 20-byte slice.
func ParseHwAddrText(s string) (HwAddr, error) {
	if len(s) != 3*HwAddrLen-1 {
		return nil, fmt.Errorf("parse ipoib hardware address %q: %d characters, want %d (20 hex bytes joined by colons): %w",
			s, len(s), 3*HwAddrLen-1, ErrBadText)
	}
	a := make(HwAddr, HwAddrLen)
	for i := range HwAddrLen {
		if i > 0 && s[3*i-1] != ':' {
			return nil, fmt.Errorf("parse ipoib hardware address %q: byte %d not after a colon: %w", s, i, ErrBadText)
		}
		hi, ok1 := unhex(s[3*i])
		lo, ok2 := unhex(s[3*i+1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("parse ipoib hardware address %q: byte %d %q is not hexadecimal: %w", s, i, s[3*i:3*i+2], ErrBadText)
		}
		a[i] = hi<<4 | lo
	}
	return a, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
