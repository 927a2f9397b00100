package ipoib

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ibv"
)

// Neighbor is one entry of the kernel's neighbour table (ARP for IPv4,
// neighbour discovery for IPv6) on an IPoIB interface: an IP address and
// the 20-byte hardware address that names the neighbour's port (its GID)
// and UD QP.
type Neighbor struct {
	IP        netip.Addr `json:"ip"`
	Interface string     `json:"interface"`
	// State is the NUD state as `ip neigh` prints it (REACHABLE, STALE,
	// PERMANENT, NOARP, INCOMPLETE, FAILED, ...).
	State string `json:"state"`
	// HwAddr is the neighbour's hardware address, nil when the entry has
	// none of 20 bytes (an INCOMPLETE or FAILED entry has none at all);
	// Note says why. GID, QPN and Flags are its fields.
	HwAddr HwAddr  `json:"hw_addr,omitempty"`
	GID    ibv.GID `json:"gid"`
	QPN    uint32  `json:"qpn"`
	Flags  Flags   `json:"flags"`
	// Multicast marks a multicast group's entry (QPN 0xFFFFFF, an MGID):
	// the NOARP entries the kernel keeps for the groups it sends to.
	Multicast bool `json:"multicast,omitempty"`
	// Connected reports whether unicast to this neighbour goes over a
	// connected-mode RC connection: the interface is in connected mode
	// and the neighbour's address has FlagRC (ipoib_cm_enabled); otherwise
	// it goes as datagrams over the UD QP.
	Connected bool   `json:"connected"`
	Note      string `json:"note,omitempty"`
}

// Usable reports whether the entry names a unicast neighbour the kernel
// can send to: a 20-byte address, not multicast, not FAILED.
func (n Neighbor) Usable() bool {
	return n.HwAddr != nil && !n.Multicast && !strings.Contains(n.State, "FAILED")
}

// Neighbors returns the neighbour entries of an IPoIB interface, IPv4 and
// IPv6, in the kernel's order.
func (h *Host) Neighbors(ifc Interface) ([]Neighbor, error) {
	neighs, err := retryDump(func() ([]netlink.Neigh, error) { return h.nl.NeighList(ifc.Index, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list the neighbours of %s: netlink neighbour dump: %w", ifc.Name, err)
	}
	out := make([]Neighbor, 0, len(neighs))
	for _, nb := range neighs {
		if nb.LinkIndex != ifc.Index {
			continue // a filtered dump returns only this link's; a fake may not
		}
		ip, ok := netip.AddrFromSlice(nb.IP)
		if !ok {
			continue
		}
		out = append(out, neighbor(ifc, ip.Unmap(), nb))
	}
	return out, nil
}

// neighbor decodes one entry.
func neighbor(ifc Interface, ip netip.Addr, nb netlink.Neigh) Neighbor {
	n := Neighbor{IP: ip, Interface: ifc.Name, State: NUDState(nb.State)}
	a := HwAddr(nb.HardwareAddr)
	switch {
	case len(a) == 0:
		n.Note = "no hardware address"
		return n
	case len(a) != HwAddrLen:
		n.Note = fmt.Sprintf("hardware address %s is %d bytes, not %d", a, len(a), HwAddrLen)
		return n
	}
	n.HwAddr = HwAddr(append([]byte(nil), a...))
	n.GID, n.QPN, n.Flags = a.GID(), a.QPN(), a.Flags()
	n.Multicast = a.IsMulticast()
	n.Connected = !n.Multicast && ifc.Mode == ModeConnected && n.Flags&FlagRC != 0
	return n
}

// Neighbor returns the neighbour entry of ip on an IPoIB interface: its
// GID and QPN. An address with no entry, or with one that is not usable
// (no hardware address yet, FAILED, multicast), is an error matching
// ErrNoNeighbor that says which.
func (h *Host) Neighbor(ifc Interface, ip netip.Addr) (Neighbor, error) {
	ns, err := h.Neighbors(ifc)
	if err != nil {
		return Neighbor{}, err
	}
	return FindNeighbor(ns, ip)
}

// FindNeighbor picks ip's usable entry from ns, as Host.Neighbor does.
func FindNeighbor(ns []Neighbor, ip netip.Addr) (Neighbor, error) {
	ip = ip.Unmap()
	for _, n := range ns {
		if n.IP != ip {
			continue
		}
		if !n.Usable() {
			why := n.Note
			if why == "" && n.Multicast {
				why = "a multicast group"
			}
			if why == "" {
				why = "state " + n.State
			}
			return n, fmt.Errorf("resolve %v on %s: entry %s: %s: %w", ip, n.Interface, n.State, why, ErrNoNeighbor)
		}
		return n, nil
	}
	return Neighbor{}, fmt.Errorf("resolve %v: not in the neighbour table (ping it, or add it with ip neigh): %w", ip, ErrNoNeighbor)
}

// nudNames are the NUD state bits (include/uapi/linux/neighbour.h), named
// as iproute2 prints them.
var nudNames = []struct {
	bit  int
	name string
}{
	{netlink.NUD_INCOMPLETE, "INCOMPLETE"},
	{netlink.NUD_REACHABLE, "REACHABLE"},
	{netlink.NUD_STALE, "STALE"},
	{netlink.NUD_DELAY, "DELAY"},
	{netlink.NUD_PROBE, "PROBE"},
	{netlink.NUD_FAILED, "FAILED"},
	{netlink.NUD_NOARP, "NOARP"},
	{netlink.NUD_PERMANENT, "PERMANENT"},
}

// NUDState names a neighbour entry's state bits, joined by commas when
// several are set; 0 is NONE.
func NUDState(state int) string {
	if state == netlink.NUD_NONE {
		return "NONE"
	}
	var parts []string
	for _, s := range nudNames {
		if state&s.bit != 0 {
			parts = append(parts, s.name)
			state &^= s.bit
		}
	}
	if state != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", state))
	}
	return strings.Join(parts, ",")
}
