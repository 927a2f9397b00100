package mcast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Sentinel errors.
var (
	// ErrNotMulticast means an IP address is not a multicast group
	// (224.0.0.0/4, ff00::/8), or a GID does not name one.
	ErrNotMulticast = errors.New("not a multicast group")
	// ErrBadMapping means a Mapping's fields cannot make an MGID (an
	// unknown form, a scope that is not 1 to 15).
	ErrBadMapping = errors.New("bad MGID mapping")
	// ErrNotMapped means a GID is a multicast GID but not one that any
	// form here makes from an IP group.
	ErrNotMapped = errors.New("not an MGID of an IP group")
)

// MGID is a multicast GID, 16 bytes in network order.
type MGID [16]byte

// String returns the MGID in IPv6 notation, as the kernel and the IB tools
// print GIDs.
func (g MGID) String() string { return netip.AddrFrom16(g).String() }

// IsMulticast reports whether g is a multicast GID on some fabric: ff00::/8
// (InfiniBand, RoCEv2 IPv6 groups) or an IPv4-mapped IPv4 multicast group
// (RoCEv2), as the kernel's rdma_is_multicast_addr decides.
func (g MGID) IsMulticast() bool {
	a := netip.AddrFrom16(g)
	return a.IsMulticast() || (a.Is4In6() && a.Unmap().IsMulticast())
}

// Form is the way an IP multicast group is written as an MGID.
type Form uint8

// Forms.
const (
	// RoCEv2 is the RoCEv2 GID of the group: ::ffff:a.b.c.d for IPv4, the
	// group itself for IPv6 (cma_iboe_set_mgid).
	RoCEv2 Form = iota + 1
	// IPoIB is RFC 4391's mapping, signature 0x401b (IPv4) or 0x601b
	// (IPv6), with the scope and P_Key of the link's broadcast address
	// (ip_ib_mc_map, ipv6_ib_mc_map).
	IPoIB
	// RDMACM is rdma_cm's mapping in the UDP port space: IPoIB's with the
	// signature 0x4001 or 0x6001 (cma_set_mgid).
	RDMACM
	// SAAssigned is an MGID the subnet administrator assigned (signature
	// 0xa01b), which rdma_cm takes as an IPv6 address of the same 16 bytes
	// and joins unchanged (cma_set_mgid).
	SAAssigned
)

var formNames = [...]string{RoCEv2: "RoCEv2", IPoIB: "IPoIB", RDMACM: "RDMA-CM", SAAssigned: "SA-assigned"}

func (f Form) String() string {
	if int(f) < len(formNames) && formNames[f] != "" {
		return formNames[f]
	}
	return fmt.Sprintf("Form(%d)", uint8(f))
}

// Scopes of an InfiniBand MGID (the low four bits of byte 1; IBA 4.1.1,
// the IPv6 scopes of RFC 4291).
const (
	ScopeLinkLocal = 0x2
	ScopeSiteLocal = 0x5
	ScopeOrgLocal  = 0x8
	ScopeGlobal    = 0xe
)

// DefaultPKey is the default partition's P_Key with the full membership
// bit, the P_Key of an IPoIB link on the default partition.
const DefaultPKey = 0xffff

// Signatures: bytes 2 and 3 of an IB MGID that names an IP group.
const (
	sigIPoIB4  = 0x401b
	sigIPoIB6  = 0x601b
	sigRDMACM4 = 0x4001
	sigRDMACM6 = 0x6001
	sigSA      = 0xa01b
)

// Mapping is a form and, for the InfiniBand forms, the scope and P_Key
// the MGID carries. The zero Mapping maps nothing.
type Mapping struct {
	Form Form
	// Scope is the MGID's scope (IPoIB and RDMA-CM forms): the low four
	// bits of byte 5 of the link's broadcast address, ScopeLinkLocal on a
	// default IPoIB link.
	Scope uint8
	// PKey is the MGID's P_Key field (IPoIB and RDMA-CM forms): bytes 8
	// and 9 of the link's broadcast address, DefaultPKey on the default
	// partition.
	PKey uint16
}

// DefaultIPoIB and DefaultRDMACM are the mappings of an IPoIB link on the
// default partition with the default broadcast address (link-local scope,
// P_Key 0xffff): what the kernel uses on a port nobody configured.
var (
	DefaultIPoIB  = Mapping{Form: IPoIB, Scope: ScopeLinkLocal, PKey: DefaultPKey}
	DefaultRDMACM = Mapping{Form: RDMACM, Scope: ScopeLinkLocal, PKey: DefaultPKey}
)

func (m Mapping) String() string {
	switch m.Form {
	case IPoIB, RDMACM:
		return fmt.Sprintf("%v (scope %#x, P_Key %#04x)", m.Form, m.Scope, m.PKey)
	}
	return m.Form.String()
}

func (m Mapping) check() error {
	switch m.Form {
	case RoCEv2, SAAssigned:
		return nil
	case IPoIB, RDMACM:
		if m.Scope == 0 || m.Scope > 0xf {
			return fmt.Errorf("%w: %v scope %#x is not 1 to 15", ErrBadMapping, m.Form, m.Scope)
		}
		return nil
	}
	return fmt.Errorf("%w: %v", ErrBadMapping, m.Form)
}

// MGID returns the MGID of the IP multicast group in mapping m. An
// IPv4-mapped IPv6 address is taken as the IPv4 group. It fails for an
// address that is not a multicast group, and (SAAssigned) for one that is
// not an SA-assigned MGID.
func (m Mapping) MGID(group netip.Addr) (MGID, error) {
	if err := m.check(); err != nil {
		return MGID{}, fmt.Errorf("mcast: MGID of %v: %w", group, err)
	}
	group = group.Unmap()
	if !group.IsMulticast() {
		return MGID{}, fmt.Errorf("mcast: MGID of %v: %w", group, ErrNotMulticast)
	}
	var g MGID
	switch m.Form {
	case RoCEv2:
		return MGID(group.As16()), nil // IPv4: ::ffff:a.b.c.d
	case SAAssigned:
		g = MGID(group.As16())
		if !isSA(g) {
			return MGID{}, fmt.Errorf("mcast: MGID of %v: %w: not an SA-assigned MGID (ff1x:a01b::/32)", group, ErrBadMapping)
		}
		return g, nil
	}
	if group.Is6() {
		if g = MGID(group.As16()); m.Form == RDMACM && isSA(g) {
			// cma_set_mgid passes an SA-assigned MGID through.
			return g, nil
		}
	}
	g[0] = 0xff
	g[1] = 0x10 | m.Scope
	sig := uint16(sigIPoIB4)
	if group.Is6() {
		sig = sigIPoIB6
	}
	if m.Form == RDMACM {
		sig = sig&0xff00 | 0x01
	}
	binary.BigEndian.PutUint16(g[2:], sig)
	binary.BigEndian.PutUint16(g[4:], m.PKey)
	if group.Is4() {
		clear(g[6:12])
		binary.BigEndian.PutUint32(g[12:], binary.BigEndian.Uint32(group.AsSlice())&0x0fffffff)
	} else {
		a := group.As16()
		copy(g[6:], a[6:])
	}
	return g, nil
}

// isSA reports whether g is an SA-assigned MGID as cma_set_mgid tests it:
// the first 32 bits, scope aside, are ff10:a01b.
func isSA(g MGID) bool { return binary.BigEndian.Uint32(g[:])&0xfff0ffff == 0xff10a01b }

// Group is the IP multicast group an MGID names, and how.
type Group struct {
	// Addr is the group. For an IPv6 group in the IPoIB or RDMA-CM form
	// (Bits 80) the MGID does not hold its first 48 bits: Addr has them as
	// ff0S:0:0 with S the MGID's scope, which is right for the groups the
	// IP stack joins on an IPoIB link of that scope (ff02::1,
	// ff02::1:ffxx:xxxx on a link-local one).
	Addr netip.Addr
	// Mapping is the MGID's form, and its scope and P_Key (IPoIB and
	// RDMA-CM forms; SAAssigned: the scope).
	Mapping Mapping
	// Bits is how many trailing bits of Addr the MGID fixed: 32 for IPv4,
	// 128 for IPv6 in the RoCEv2 and SA-assigned forms, 80 for IPv6 in
	// the IPoIB and RDMA-CM forms.
	Bits int
}

// Contains reports whether group maps to the same MGID as g.Addr: it is
// the same group, or (Bits 80) an IPv6 group with the same low 80 bits.
func (g Group) Contains(group netip.Addr) bool {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() != g.Addr.Is4() {
		return false
	}
	if g.Bits >= group.BitLen() {
		return group == g.Addr
	}
	a, b := group.As16(), g.Addr.As16()
	return [10]byte(a[6:]) == [10]byte(b[6:])
}

// ParseRoCEv2 returns the IP multicast group a RoCEv2 MGID names: the IPv4
// group of an IPv4-mapped MGID, else the IPv6 group of the same bytes.
func ParseRoCEv2(g MGID) (Group, error) {
	a := netip.AddrFrom16(g).Unmap()
	if !a.IsMulticast() {
		return Group{}, fmt.Errorf("mcast: group of RoCEv2 GID %v: %w", g, ErrNotMulticast)
	}
	return Group{Addr: a, Mapping: Mapping{Form: RoCEv2}, Bits: a.BitLen()}, nil
}

// ParseIB returns the IP multicast group an InfiniBand MGID names and its
// form, from the MGID's signature (bytes 2 and 3): IPoIB (0x401b, 0x601b),
// RDMA-CM (0x4001, 0x6001) or SA-assigned (0xa01b). An IPv4 MGID may hold
// the group's top four bits (1110) or, as the kernel writes it, zeros
// there; its bytes 6 to 11 must be zero.
func ParseIB(g MGID) (Group, error) {
	if g[0] != 0xff {
		return Group{}, fmt.Errorf("mcast: group of MGID %v: %w", g, ErrNotMulticast)
	}
	scope := g[1] & 0xf
	if isSA(g) {
		return Group{Addr: netip.AddrFrom16(g), Mapping: Mapping{Form: SAAssigned, Scope: scope}, Bits: 128}, nil
	}
	sig := binary.BigEndian.Uint16(g[2:])
	m := Mapping{Scope: scope, PKey: binary.BigEndian.Uint16(g[4:])}
	switch sig {
	case sigIPoIB4, sigIPoIB6:
		m.Form = IPoIB
	case sigRDMACM4, sigRDMACM6:
		m.Form = RDMACM
	default:
		return Group{}, fmt.Errorf("mcast: group of MGID %v: %w: signature %#04x", g, ErrNotMapped, sig)
	}
	if g[1]>>4 != 1 || scope == 0 {
		// The kernel writes flags 1 (transient) and the broadcast's scope.
		return Group{}, fmt.Errorf("mcast: group of MGID %v: %w: flags and scope %#02x", g, ErrNotMapped, g[1])
	}
	if sig&0xf000 == 0x6000 {
		var a [16]byte
		a[0], a[1] = 0xff, scope
		copy(a[6:], g[6:])
		return Group{Addr: netip.AddrFrom16(a), Mapping: m, Bits: 80}, nil
	}
	if [6]byte(g[6:12]) != [6]byte{} {
		return Group{}, fmt.Errorf("mcast: group of MGID %v: %w: bytes 6 to 11 of an IPv4 MGID are not zero", g, ErrNotMapped)
	}
	v := binary.BigEndian.Uint32(g[12:])
	if top := v >> 28; top != 0 && top != 0xe {
		return Group{}, fmt.Errorf("mcast: group of MGID %v: %w", g, ErrNotMulticast)
	}
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], v|0xe0000000)
	return Group{Addr: netip.AddrFrom4(a), Mapping: m, Bits: 32}, nil
}
