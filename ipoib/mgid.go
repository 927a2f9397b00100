package ipoib

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rbridge/rbridge/roce/mcast"
)

// MGID is the multicast GID of an IPoIB multicast group (RFC 4391 section
// 4), the last 16 bytes of a multicast hardware address. The broadcast
// address an IPoIB interface joins first carries one, as do the addresses
// ip_ib_mc_map and ipv6_ib_mc_map (include/net/ip.h, include/net/if_inet6.h)
// map IP multicast groups to.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      0xFF     | Flags | Scope |        IPoIB signature        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|             P_Key             |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                    group ID (80 bits)                         |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// 0xFF marks a multicast GID. Flags is 1 (T: a transient group) in every
// MGID Linux makes. Scope is as in IPv6 (2 link-local, 5 site-local,
// 8 organization-local, 14 global); the kernel takes it from the
// interface's broadcast address, link-local unless an administrator set
// another. The signature is 0x401B for IPv4, 0x601B for IPv6. P_Key is the
// interface's partition key with the full-membership bit. The group ID of
// an IPv4 group holds the low 28 bits of the group address in its last 4
// bytes (0xFFFFFFFF for the broadcast group); of an IPv6 group, the group
// address's last 10 bytes.
type MGID []byte

// MGIDLen is the length of an MGID.
const MGIDLen = 16

const (
	mgidMcast = 0
	mgidScope = 1 // flags in the high nibble, scope in the low
	mgidSig   = 2
	mgidPKey  = 4
	mgidGroup = 6
)

// The IPoIB signatures (RFC 4391 section 4).
const (
	SignatureIPv4 uint16 = 0x401b
	SignatureIPv6 uint16 = 0x601b
)

// mgidFlagT is the T flag every MGID Linux makes carries.
const mgidFlagT = 0x1

// Scope is the scope of a multicast group.
type Scope uint8

// Scopes (IBA 4.1.1; the IPv6 scopes of RFC 4291).
const (
	ScopeLinkLocal Scope = 0x2
	ScopeSiteLocal Scope = 0x5
	ScopeOrgLocal  Scope = 0x8
	ScopeGlobal    Scope = 0xe
)

func (s Scope) String() string {
	switch s {
	case ScopeLinkLocal:
		return "link-local"
	case ScopeSiteLocal:
		return "site-local"
	case ScopeOrgLocal:
		return "organization-local"
	case ScopeGlobal:
		return "global"
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// MGIDFields holds the fields of an MGID.
type MGIDFields struct {
	Flags     uint8 // 4 bits
	Scope     Scope // 4 bits
	Signature uint16
	PKey      PKey
	Group     [10]byte
}

// IsValid reports whether m is long enough to hold an MGID. It is the
// precondition of every getter and setter.
func (m MGID) IsValid() bool { return len(m) >= MGIDLen }

// Flags returns the 4 flag bits.
func (m MGID) Flags() uint8 { return m[mgidScope] >> 4 }

// Scope returns the scope.
func (m MGID) Scope() Scope { return Scope(m[mgidScope] & 0xf) }

// Signature returns the IPoIB signature.
func (m MGID) Signature() uint16 { return binary.BigEndian.Uint16(m[mgidSig:]) }

// PKey returns the partition key.
func (m MGID) PKey() PKey { return PKey(binary.BigEndian.Uint16(m[mgidPKey:])) }

// Group returns the 80-bit group ID.
func (m MGID) Group() [10]byte { return [10]byte(m[mgidGroup:MGIDLen]) }

// IsIPoIB reports whether m is an IPoIB MGID: a multicast GID with the
// IPv4 or the IPv6 signature.
func (m MGID) IsIPoIB() bool {
	s := m.Signature()
	return m[mgidMcast] == 0xff && (s == SignatureIPv4 || s == SignatureIPv6)
}

// IsBroadcast reports whether m is the IPv4 broadcast group of its
// partition: signature 0x401B, group ID zero but for 0xFFFFFFFF at its end.
func (m MGID) IsBroadcast() bool {
	if m[mgidMcast] != 0xff || m.Signature() != SignatureIPv4 {
		return false
	}
	for _, b := range m[mgidGroup:12] {
		if b != 0 {
			return false
		}
	}
	return binary.BigEndian.Uint32(m[12:]) == 0xffffffff
}

// SetScope sets the scope.
func (m MGID) SetScope(s Scope) { m[mgidScope] = m[mgidScope]&0xf0 | byte(s)&0xf }

// SetPKey sets the partition key.
func (m MGID) SetPKey(p PKey) { binary.BigEndian.PutUint16(m[mgidPKey:], uint16(p)) }

// Fields returns all fields of m.
func (m MGID) Fields() MGIDFields {
	return MGIDFields{Flags: m.Flags(), Scope: m.Scope(), Signature: m.Signature(), PKey: m.PKey(), Group: m.Group()}
}

// Encode writes every byte of the MGID from f, 0xFF first.
func (m MGID) Encode(f *MGIDFields) {
	m[mgidMcast] = 0xff
	m[mgidScope] = f.Flags<<4 | byte(f.Scope)&0xf
	binary.BigEndian.PutUint16(m[mgidSig:], f.Signature)
	binary.BigEndian.PutUint16(m[mgidPKey:], uint16(f.PKey))
	copy(m[mgidGroup:MGIDLen], f.Group[:])
}

// Broadcast returns the broadcast address of an IPoIB interface in
// partition pkey: what ipoib_setup_common and ipoib_ndo_init
// (drivers/infiniband/ulp/ipoib/ipoib_main.c) give the interface, flags 0,
// QPN 0xFFFFFF and the MGID ff1<scope>:401b:<pkey>::ffff:ffff. The kernel
// always sets pkey's full-membership bit first; pass pkey as the
// interface's sysfs pkey file shows it. With ScopeLinkLocal and 0xffff it
// is 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff, the brd
// of nearly every IPoIB interface.
func Broadcast(pkey PKey, scope Scope) HwAddr {
	a := make(HwAddr, HwAddrLen)
	a.SetQPN(MulticastQPN)
	f := MGIDFields{Flags: mgidFlagT, Scope: scope, Signature: SignatureIPv4, PKey: pkey}
	f.Group[6], f.Group[7], f.Group[8], f.Group[9] = 0xff, 0xff, 0xff, 0xff
	a.MGID().Encode(&f)
	return a
}

// MulticastHwAddr returns the hardware address the kernel maps the IP
// multicast group to on an interface with the given broadcast address, as
// ip_ib_mc_map (IPv4) and ipv6_ib_mc_map (IPv6) do: QPN 0xFFFFFF and the
// group's MGID in the IPoIB form with the broadcast address's scope and
// P_Key (package roce/mcast computes it, as for rdma_cm's form). Such
// addresses are what the neighbour table holds for multicast groups
// (NOARP entries).
func MulticastHwAddr(group netip.Addr, broadcast HwAddr) (HwAddr, error) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return nil, fmt.Errorf("map %v to an ipoib multicast address: not a multicast group", group)
	}
	if !broadcast.IsValid() {
		return nil, fmt.Errorf("map %v to an ipoib multicast address: broadcast address %d bytes, need %d: %w",
			group, len(broadcast), HwAddrLen, ErrTruncated)
	}
	m, err := mcast.FromBroadcast(broadcast[:HwAddrLen], mcast.IPoIB)
	if err != nil {
		return nil, fmt.Errorf("map %v to an ipoib multicast address: %w", group, err)
	}
	g, err := m.MGID(group)
	if err != nil {
		return nil, fmt.Errorf("map %v to an ipoib multicast address: %w", group, err)
	}
	a := make(HwAddr, HwAddrLen)
	a.SetQPN(MulticastQPN)
	copy(a[hwGID:], g[:])
	return a, nil
}

// PKey is an InfiniBand partition key: the low 15 bits name the partition,
// the top bit is full membership (limited members talk to full members
// only). IPoIB always runs with the full-membership bit set, whatever the
// child interface was created with.
type PKey uint16

// DefaultPKey is the default partition, full membership: the P_Key of
// every port's own IPoIB interface unless the subnet manager assigns
// another at index 0.
const DefaultPKey PKey = 0xffff

// Full reports whether the full-membership bit is set.
func (p PKey) Full() bool { return p&0x8000 != 0 }

// Partition returns the partition number, the low 15 bits.
func (p PKey) Partition() uint16 { return uint16(p) & 0x7fff }

// String formats p as sysfs's pkey file does: 0x and four hex digits.
func (p PKey) String() string { return fmt.Sprintf("0x%04x", uint16(p)) }

// MarshalText formats p as String does.
func (p PKey) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// ParsePKey parses a P_Key in hexadecimal, with or without 0x ("0x8001",
// "8001", as sysfs and `ip link ... pkey` write it).
func ParsePKey(s string) (PKey, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0x"), "0X")
	v, err := strconv.ParseUint(t, 16, 16)
	if err != nil || t == "" {
		return 0, fmt.Errorf("parse p_key %q: %w", s, ErrBadText)
	}
	return PKey(v), nil
}
