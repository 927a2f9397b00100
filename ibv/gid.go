package ibv

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// GID is a 128-bit InfiniBand global identifier. On RoCE ports it is an IP
// address: IPv6, or IPv4 mapped (::ffff:a.b.c.d).
type GID [16]byte

// ParseGID parses an IPv6-style GID ("fe80::1", "::ffff:10.0.0.1") or an
// IPv4 address, which it maps.
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, fmt.Errorf("parse gid %q: %w", s, err)
	}
	return GID(a.As16()), nil
}

// IsZero reports whether g is all zeros (an unused table slot).
func (g GID) IsZero() bool { return g == GID{} }

// Addr is g as an IP address, IPv4-mapped GIDs unmapped.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats g as IPv6 text, the way ibv_devinfo and sysfs do
// ("::ffff:10.0.0.1", "fe80::...").
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// MarshalText implements encoding.TextMarshaler.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (g *GID) UnmarshalText(b []byte) error {
	v, err := ParseGID(string(b))
	*g = v
	return err
}

// GIDType is the kind of traffic a GID table entry is for (enum
// ibv_gid_type; sysfs gid_attrs/types).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0 // InfiniBand, or RoCEv1 on Ethernet ports ("IB/RoCE v1" in sysfs)
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCEv1"
	case GIDTypeRoCEv2:
		return "RoCEv2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t GIDType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// GIDEntry is one valid slot of a port's GID table.
type GIDEntry struct {
	Device  string  `json:"device,omitempty"`
	Port    int     `json:"port"`
	Index   int     `json:"index"`
	GID     GID     `json:"gid"`
	Type    GIDType `json:"type"`
	Netdev  string  `json:"netdev,omitempty"`
	Ifindex int     `json:"ifindex,omitempty"`
}

func (e GIDEntry) String() string {
	s := fmt.Sprintf("%s port %d index %d %s %s", e.Device, e.Port, e.Index, e.Type, e.GID)
	if e.Device == "" {
		s = s[1:]
	}
	if e.Netdev != "" {
		s += " (" + e.Netdev + ")"
	}
	return s
}

// GIDQuery says which GID to choose: the one that carries RoCEv2 for IP,
// optionally restricted to a device, port or netdev, or an explicit index;
// for an IP on an IPoIB netdev, GID index 0 of the netdev's port.
type GIDQuery struct {
	IP     netip.Addr // the local address; its zone, if any, restricts the netdev
	Device string     // "" for any device
	Port   int        // 0 for any port
	Netdev string     // "" for any netdev (or the IP's zone)

	// IPoIB is the IPoIB netdev that holds IP and the RDMA port under it,
	// when IP is on one (the caller finds it: package ipoib); nil for an
	// IP on any other netdev. No GID holds an address on an InfiniBand
	// port: its GIDs are the subnet prefix and the port's GUID.
	IPoIB *IPoIBPort

	// MAC is the hardware address of the Ethernet netdev that holds IP,
	// and MACNetdev its name, when the caller found it. An iWARP device
	// (siw, cxgb4, irdma) keeps no address in its GIDs: its GID is the
	// hardware address of the netdev it runs on, the rest zero, and
	// rdma_cm reaches its peers by IP. When no GID holds IP, ChooseGID
	// takes the one entry shaped so.
	MAC       net.HardwareAddr
	MACNetdev string

	// UseIndex forces GID table index Index (the operator's override).
	// Device (and Port, if the device has several) must then say where,
	// unless IPoIB does.
	UseIndex bool
	Index    int
}

// IPoIBPort is an IPoIB netdev (a port's own, ib0, or a P_Key child,
// ib0.8001) and the RDMA device and port it runs on.
type IPoIBPort struct {
	Netdev string `json:"netdev"`
	// Device and Port are the RDMA port; "" and 0 when they are not known,
	// and then Unknown says why.
	Device  string `json:"device,omitempty"`
	Port    int    `json:"port,omitempty"`
	Unknown string `json:"unknown,omitempty"`
}

func (p IPoIBPort) String() string {
	if p.Device == "" {
		return fmt.Sprintf("IPoIB netdev %s", p.Netdev)
	}
	return fmt.Sprintf("IPoIB netdev %s on %s port %d", p.Netdev, p.Device, p.Port)
}

// GIDChoice is the GID chosen for a query and why, in words an operator can
// act on.
type GIDChoice struct {
	GIDEntry
	Reason   string `json:"reason"`
	Override bool   `json:"override,omitempty"`
	// IPoIB names the IPoIB netdev the IP is on when the port was found
	// through it (an InfiniBand port); "" on RoCE.
	IPoIB string `json:"ipoib,omitempty"`
}

// ChooseGID picks, from GID table entries (of any number of devices and
// ports), the one to use as source GID for RoCEv2 traffic from q.IP, or the
// override q.Index. Picking the wrong index is the RDMA misconfiguration
// users report most: the rule is "the RoCEv2 entry whose address is the IP",
// never "index 0" or "index 3". Errors match ErrNoGID or ErrAmbiguousGID.
//
// An IP on an IPoIB netdev (q.IPoIB) is on an InfiniBand port, where no GID
// holds an address: the choice is that port's GID index 0, the GID the
// IPoIB driver puts in the netdev's hardware address and rdma_cm's source
// GID for the IP. A device, port or netdev q names must be the IPoIB
// netdev's, else the error matches ErrWrongPort; a port not known, or
// without GID 0 (or the override's index), gives an error matching
// ErrNoIPoIBGID. Neither matches ErrNoGID, whose words are RoCE's.
func ChooseGID(table []GIDEntry, q GIDQuery) (GIDChoice, error) {
	if q.IPoIB != nil {
		return chooseIPoIB(table, q)
	}
	netdev := q.Netdev
	if netdev == "" {
		netdev = q.IP.Zone()
	}
	inScope := func(e GIDEntry) bool {
		return (q.Device == "" || e.Device == q.Device) &&
			(q.Port == 0 || e.Port == q.Port) &&
			(netdev == "" || e.Netdev == netdev)
	}
	scope := describeScope(q.Device, q.Port, netdev)
	ip := q.IP.WithZone("").Unmap()

	if q.UseIndex {
		return chooseIndex(table, q, ip, scope)
	}
	if !ip.IsValid() || ip.IsUnspecified() {
		return GIDChoice{}, fmt.Errorf("choose gid: no IP address given: %w", ErrNoGID)
	}

	var v2, other, outside []GIDEntry
	for _, e := range table {
		if e.GID.IsZero() || e.GID.Addr() != ip {
			continue
		}
		switch {
		case !inScope(e):
			outside = append(outside, e)
		case e.Type == GIDTypeRoCEv2:
			v2 = append(v2, e)
		default:
			other = append(other, e)
		}
	}
	switch len(v2) {
	case 1:
		c := GIDChoice{GIDEntry: v2[0]}
		c.Reason = fmt.Sprintf("the only RoCEv2 GID for %s%s", ip, scope)
		if len(other) > 0 {
			c.Reason += fmt.Sprintf("; skipped %s (not RoCEv2)", joinEntries(other))
		}
		return c, nil
	case 0:
		switch {
		case len(other) > 0:
			return GIDChoice{}, fmt.Errorf("choose gid for %s%s: only %s, no RoCEv2 entry (the device or kernel does not offer RoCEv2 for this address): %w",
				ip, scope, joinEntries(other), ErrNoGID)
		case len(outside) > 0:
			return GIDChoice{}, fmt.Errorf("choose gid for %s%s: no GID in scope; outside it: %s: %w",
				ip, scope, joinEntries(outside), ErrNoGID)
		}
		if c, ok, err := chooseIWARP(table, q, ip, scope, inScope); ok {
			return c, err
		}
		return GIDChoice{}, fmt.Errorf("choose gid for %s%s: no GID table entry holds this address (is an RDMA device bound to the netdev that has it?): %w",
			ip, scope, ErrNoGID)
	}
	return GIDChoice{}, fmt.Errorf("choose gid for %s%s: %d RoCEv2 entries: %s; name the device, port or netdev, or give an explicit index: %w",
		ip, scope, len(v2), joinEntries(v2), ErrAmbiguousGID)
}

// chooseIPoIB is ChooseGID for an IP on an IPoIB netdev: GID index 0 of
// the netdev's port, or the override on that port.
func chooseIPoIB(table []GIDEntry, q GIDQuery) (GIDChoice, error) {
	p := *q.IPoIB
	ip := q.IP.WithZone("").Unmap()
	netdev := q.Netdev
	if netdev == "" {
		netdev = q.IP.Zone()
	}
	scope := describeScope(q.Device, q.Port, netdev)
	if p.Device == "" || p.Port == 0 {
		why := ""
		if p.Unknown != "" {
			why = " (" + p.Unknown + ")"
		}
		return GIDChoice{}, fmt.Errorf("choose gid for %s%s: it is on %s, whose RDMA device and port are unknown%s: %w",
			ip, scope, p, why, ErrNoIPoIBGID)
	}
	if (q.Device != "" && q.Device != p.Device) || (q.Port != 0 && q.Port != p.Port) || (netdev != "" && netdev != p.Netdev) {
		return GIDChoice{}, fmt.Errorf("choose gid for %s%s: %s is on %s; name that device and port, or leave them out: %w",
			ip, scope, ip, p, ErrWrongPort)
	}
	if q.UseIndex {
		q.Device, q.Port = p.Device, p.Port
		c, err := chooseIndex(table, q, ip, scope)
		if err != nil {
			// The one port is named: the entry is missing.
			return GIDChoice{}, fmt.Errorf("choose gid for %s%s: override index %d: no such valid entry on %s: %w", ip, scope, q.Index, p, ErrNoIPoIBGID)
		}
		c.IPoIB = p.Netdev
		return c, nil
	}
	for _, e := range table {
		if e.Device == p.Device && e.Port == p.Port && e.Index == 0 && !e.GID.IsZero() {
			c := GIDChoice{GIDEntry: e, IPoIB: p.Netdev}
			c.Reason = fmt.Sprintf("%s: the port's GID index 0; the IP is reached through IPoIB", p)
			return c, nil
		}
	}
	return GIDChoice{}, fmt.Errorf("choose gid for %s%s: it is on %s, which has no valid GID at index 0 (has a subnet manager configured the port?): %w",
		ip, scope, p, ErrNoIPoIBGID)
}

// chooseIWARP is ChooseGID for an IP on an Ethernet netdev that no GID
// holds: the iWARP GID of the netdev's hardware address (q.MAC), when
// exactly one entry in scope is that. The bool is false when none is.
func chooseIWARP(table []GIDEntry, q GIDQuery, ip netip.Addr, scope string, inScope func(GIDEntry) bool) (GIDChoice, bool, error) {
	if len(q.MAC) != 6 {
		return GIDChoice{}, false, nil
	}
	var want GID
	copy(want[:], q.MAC)
	var hits []GIDEntry
	for _, e := range table {
		if e.GID != want || !inScope(GIDEntry{Device: e.Device, Port: e.Port, Netdev: q.MACNetdev}) {
			continue
		}
		e.Netdev = q.MACNetdev
		hits = append(hits, e)
	}
	switch len(hits) {
	case 0:
		return GIDChoice{}, false, nil
	case 1:
		c := GIDChoice{GIDEntry: hits[0]}
		c.Reason = fmt.Sprintf("iWARP: %s port %d's GID is %s's hardware address %s, which holds %s; rdma_cm reaches peers by IP",
			c.Device, c.Port, q.MACNetdev, q.MAC, ip)
		return c, true, nil
	}
	return GIDChoice{}, true, fmt.Errorf("choose gid for %s%s: %d iWARP devices run on %s (%s): name the device: %w",
		ip, scope, len(hits), q.MACNetdev, joinEntries(hits), ErrAmbiguousGID)
}

func chooseIndex(table []GIDEntry, q GIDQuery, ip netip.Addr, scope string) (GIDChoice, error) {
	var hits []GIDEntry
	for _, e := range table {
		if e.Index == q.Index && (q.Device == "" || e.Device == q.Device) && (q.Port == 0 || e.Port == q.Port) {
			hits = append(hits, e)
		}
	}
	switch len(hits) {
	case 0:
		return GIDChoice{}, fmt.Errorf("choose gid: override index %d%s: no such valid entry: %w", q.Index, scope, ErrNoGID)
	case 1:
	default:
		return GIDChoice{}, fmt.Errorf("choose gid: override index %d matches %s: name the device and port: %w",
			q.Index, joinEntries(hits), ErrAmbiguousGID)
	}
	e := hits[0]
	c := GIDChoice{GIDEntry: e, Override: true}
	c.Reason = fmt.Sprintf("explicit override: index %d", q.Index)
	var warn []string
	switch {
	case q.IPoIB != nil:
		// An InfiniBand port's GIDs are no addresses, and none is RoCEv2.
		if e.Index != 0 {
			warn = append(warn, fmt.Sprintf("not index 0, the GID %s's hardware address carries, which rdma_cm uses", q.IPoIB.Netdev))
		}
	default:
		if e.Type != GIDTypeRoCEv2 {
			warn = append(warn, fmt.Sprintf("type %s, not RoCEv2", e.Type))
		}
		if ip.IsValid() && !ip.IsUnspecified() && e.GID.Addr() != ip {
			warn = append(warn, fmt.Sprintf("GID %s is not %s", e.GID, ip))
		}
	}
	if len(warn) > 0 {
		c.Reason += " (warning: " + strings.Join(warn, "; ") + ")"
	}
	return c, nil
}

func describeScope(dev string, port int, netdev string) string {
	var parts []string
	if dev != "" {
		parts = append(parts, "device "+dev)
	}
	if port != 0 {
		parts = append(parts, fmt.Sprintf("port %d", port))
	}
	if netdev != "" {
		parts = append(parts, "netdev "+netdev)
	}
	if len(parts) == 0 {
		return ""
	}
	return " on " + strings.Join(parts, " ")
}

func joinEntries(es []GIDEntry) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.String()
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}
