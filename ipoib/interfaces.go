package ipoib

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/roce"
)

// Interface is one IPoIB network interface: a netdev of link type
// ARPHRD_INFINIBAND.
type Interface struct {
	Name      string `json:"name"`
	Index     int    `json:"index"`
	MTU       int    `json:"mtu"`
	OperState string `json:"oper_state"` // as `ip link` shows it: up, down, lowerlayerdown, ...
	// Addrs are the interface's IP addresses with their prefix lengths.
	Addrs []netip.Prefix `json:"addrs"`

	// HwAddr is the interface's hardware address; GID, QPN and Flags are
	// its fields. An ARPHRD_INFINIBAND netdev that is not ipoib's (a tun
	// device set to that type) may have another length; then they are
	// zero and Notes says why.
	HwAddr HwAddr  `json:"hw_addr"`
	GID    ibv.GID `json:"gid"`
	QPN    uint32  `json:"qpn"`
	Flags  Flags   `json:"flags"`

	Mode Mode `json:"mode"`
	// Umcast is the umcast setting: multicast groups joined directly by
	// userspace are ignored by the driver when it is set (ipoib_set_umcast).
	Umcast bool `json:"umcast"`
	PKey   PKey `json:"pkey"`
	// Parent is the interface a P_Key child (ib0.8001) was made on; empty
	// for a port's own interface.
	Parent string `json:"parent,omitempty"`
	// Device and Port are the RDMA device and port (1-based) the interface
	// runs on; empty and 0 when they could not be found (Notes says why).
	Device string `json:"device,omitempty"`
	Port   int    `json:"port,omitempty"`

	// IBMTU is the port's active MTU when Options.PortMTU knows it.
	IBMTU roce.MTU `json:"ib_mtu"`
	// MaxMTU is what each mode allows on this interface.
	MaxMTU MTULimits `json:"max_mtu"`

	// Notes name what could not be read or does not add up, one sentence
	// each; an interface fully known has none.
	Notes []string `json:"notes,omitempty"`
}

// EncapInfiniband is what package netlink calls the link type
// ARPHRD_INFINIBAND (32) in LinkAttrs.EncapType.
const EncapInfiniband = "infiniband"

// ARPHRDInfiniband is the link type of IPoIB netdevs
// (include/uapi/linux/if_arp.h).
const ARPHRDInfiniband = 32

// Interfaces returns the machine's IPoIB interfaces, ordered by index: the
// netlink links of type ARPHRD_INFINIBAND, each with what sysfs and its
// hardware address say. No interface is not an error. What cannot be read
// about one interface goes into its Notes; only a failed link dump is an
// error.
func (h *Host) Interfaces() ([]Interface, error) {
	links, err := retryDump(h.nl.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list ipoib interfaces: netlink link dump: %w", err)
	}
	var out []Interface
	names := map[int]string{}
	parents := map[int]int{} // a child's index: its parent's, from netlink
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		if a.EncapType != EncapInfiniband {
			continue
		}
		ifc, parent := h.describe(l)
		if parent != 0 {
			parents[ifc.Index] = parent
		}
		out = append(out, ifc)
	}
	slices.SortFunc(out, func(a, b Interface) int { return cmp.Compare(a.Index, b.Index) })
	resolveChildren(out, parents, names)
	for i := range out {
		h.limits(&out[i])
	}
	return out, nil
}

// describe builds an Interface from its link and sysfs, and returns the
// index of its parent when netlink names one that sysfs does not; the RDMA
// device and port of a child come later (resolveChildren), from its
// parent.
func (h *Host) describe(l netlink.Link) (Interface, int) {
	a := l.Attrs()
	ifc := Interface{
		Name:      a.Name,
		Index:     a.Index,
		MTU:       a.MTU,
		OperState: a.OperState.String(),
		HwAddr:    HwAddr(slices.Clone(a.HardwareAddr)),
		Addrs:     []netip.Prefix{},
	}
	note := func(format string, args ...any) { ifc.Notes = append(ifc.Notes, fmt.Sprintf(format, args...)) }

	if ifc.HwAddr.IsValid() {
		ifc.GID, ifc.QPN, ifc.Flags = ifc.HwAddr.GID(), ifc.HwAddr.QPN(), ifc.HwAddr.Flags()
	} else {
		note("hardware address is %d bytes, not the %d of an IPoIB address: not an ipoib driver's interface?", len(ifc.HwAddr), HwAddrLen)
	}

	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.nl.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		note("addresses unreadable: %v", err)
	}
	for _, ad := range addrs {
		if ad.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(ad.IP)
		if !ok {
			continue
		}
		ones, _ := ad.Mask.Size()
		ifc.Addrs = append(ifc.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
	}

	// Mode, umcast and P_Key: sysfs first (the files ipoib_add_port makes),
	// else what the ipoib link kind put in the netlink answer.
	nlInfo, _ := l.(*netlink.IPoIB)
	sys := h.sysfs(ifc.Name)
	if s, err := sys.read("mode"); err == nil {
		if ifc.Mode, err = ParseMode(s); err != nil {
			note("%v", err)
		}
	} else if nlInfo != nil {
		ifc.Mode = modeFromNetlink(nlInfo.Mode)
	} else {
		note("mode unknown: %v", err)
	}
	if v, err := sys.readInt("umcast", 10); err == nil {
		ifc.Umcast = v != 0
	} else if nlInfo != nil {
		ifc.Umcast = nlInfo.Umcast != 0
	} else {
		note("umcast unknown: %v", err)
	}
	if s, err := sys.read("pkey"); err == nil {
		if ifc.PKey, err = ParsePKey(s); err != nil {
			note("%v", err)
		}
	} else if nlInfo != nil {
		ifc.PKey = PKey(nlInfo.Pkey)
	} else {
		note("P_Key unknown: %v", err)
	}

	// A P_Key child names its parent in sysfs (ipoib_vlan.c's parent
	// file) and in netlink (IFLA_LINK, ipoib_get_iflink); it has no device
	// of its own.
	if p, err := sys.read("parent"); err == nil {
		ifc.Parent = p
		return ifc, 0
	}
	if a.ParentIndex != 0 && a.ParentIndex != a.Index {
		return ifc, a.ParentIndex
	}
	h.findPort(&ifc, sys, note)
	return ifc, 0
}

// findPort sets the RDMA device and port of a port's own interface: the
// RDMA device under the netdev's device (device/infiniband/*) and dev_port
// + 1 (ipoib_parent_init sets dev_port, and dev_id as older kernels did,
// to the port less one), checked against the port's GID at index 0,
// which the interface's address carries. Without a device link it looks
// for the port whose GID 0 is the interface's.
func (h *Host) findPort(ifc *Interface, sys sysfsNetdev, note func(string, ...any)) {
	if dev, err := sys.rdmaDevice(); err != nil {
		note("%v", err)
	} else {
		ifc.Device = dev
	}
	if ifc.Device != "" {
		port, err := sys.devPort()
		if err != nil {
			note("port unknown: %v", err)
		} else {
			ifc.Port = port
		}
	}
	if ifc.Device != "" && ifc.Port != 0 {
		g, err := h.portGID0(ifc.Device, ifc.Port)
		if err != nil {
			note("GID 0 of %s port %d unreadable: %v", ifc.Device, ifc.Port, err)
		} else if ifc.HwAddr.IsValid() && g != ifc.GID {
			note("GID 0 of %s port %d is %v, the interface's address carries %v", ifc.Device, ifc.Port, g, ifc.GID)
		}
		return
	}
	if !ifc.HwAddr.IsValid() || ifc.GID.IsZero() {
		return
	}
	dev, port, err := h.portByGID(ifc.GID)
	if err != nil {
		note("no RDMA port has GID 0 %v: %v", ifc.GID, err)
		return
	}
	ifc.Device, ifc.Port = dev, port
	note("%s port %d found by its GID 0, the interface's", dev, port)
}

// resolveChildren gives each P_Key child its parent's name (from names
// when only netlink's parent index is known), RDMA device and port.
func resolveChildren(ifs []Interface, parents map[int]int, names map[int]string) {
	byName := map[string]*Interface{}
	for i := range ifs {
		byName[ifs[i].Name] = &ifs[i]
	}
	for i := range ifs {
		c := &ifs[i]
		if idx, ok := parents[c.Index]; ok {
			c.Parent = names[idx]
			if c.Parent == "" {
				c.Parent = fmt.Sprintf("#%d", idx)
			}
		}
		if c.Parent == "" {
			continue
		}
		p, ok := byName[c.Parent]
		if !ok || p.Parent != "" {
			c.Notes = append(c.Notes, fmt.Sprintf("parent %s is not a port's IPoIB interface", c.Parent))
			continue
		}
		c.Device, c.Port = p.Device, p.Port
	}
}

// limits fills the interface's IB MTU and MTU limits.
func (h *Host) limits(ifc *Interface) {
	if h.portMTU != nil && ifc.Device != "" && ifc.Port != 0 {
		ifc.IBMTU = h.portMTU(ifc.Device, ifc.Port)
	}
	ifc.MaxMTU.Datagram = DatagramMTU(ifc.IBMTU)
	if ifc.Flags&FlagRC != 0 {
		ifc.MaxMTU.Connected = ConnectedMTU(0)
	}
}

// modeFromNetlink translates IFLA_IPOIB_MODE.
func modeFromNetlink(m netlink.IPoIBMode) Mode {
	switch m {
	case netlink.IPOIB_MODE_DATAGRAM:
		return ModeDatagram
	case netlink.IPOIB_MODE_CONNECTED:
		return ModeConnected
	}
	return ModeUnknown
}

// InterfaceFor returns the IPoIB interface of an RDMA device's port (1-based):
// the port's own interface, not one of its P_Key children. It is the
// interface an IP fallback for that port's traffic goes over.
func (h *Host) InterfaceFor(device string, port int) (Interface, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return Interface{}, err
	}
	return ForPort(ifs, device, port)
}

// ForPort picks from ifs the interface of device's port: the port's own
// interface, not a P_Key child. The error matches ErrNoInterface when
// there is none, and names the interfaces there are.
func ForPort(ifs []Interface, device string, port int) (Interface, error) {
	var seen []string
	for _, ifc := range ifs {
		if ifc.Device == device && ifc.Port == port && ifc.Parent == "" {
			return ifc, nil
		}
		seen = append(seen, fmt.Sprintf("%s (%s port %d)", ifc.Name, orDash(ifc.Device), ifc.Port))
	}
	if len(seen) == 0 {
		return Interface{}, fmt.Errorf("find the ipoib interface of %s port %d: the machine has none: %w", device, port, ErrNoInterface)
	}
	return Interface{}, fmt.Errorf("find the ipoib interface of %s port %d: none among %v: %w", device, port, seen, ErrNoInterface)
}

// InterfaceWith returns the IPoIB interface that holds address ip (a
// port's own or a P_Key child), with its RDMA device and port when they
// were found. The error matches ErrNoInterface when no IPoIB interface
// holds it.
func (h *Host) InterfaceWith(ip netip.Addr) (Interface, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return Interface{}, err
	}
	return WithAddr(ifs, ip)
}

// WithAddr picks from ifs the interface that holds ip (an IPv4-mapped ip
// is unmapped; a zone, if any, must be the interface's name). The error
// matches ErrNoInterface when none does, and names each when several do.
func WithAddr(ifs []Interface, ip netip.Addr) (Interface, error) {
	zone, a := ip.Zone(), ip.WithZone("").Unmap()
	var hits []Interface
	for _, ifc := range ifs {
		if zone != "" && ifc.Name != zone {
			continue
		}
		for _, p := range ifc.Addrs {
			if p.Addr().WithZone("").Unmap() == a {
				hits = append(hits, ifc)
				break
			}
		}
	}
	switch len(hits) {
	case 0:
		return Interface{}, fmt.Errorf("find the ipoib interface with %v: none of %d holds it: %w", ip, len(ifs), ErrNoInterface)
	case 1:
		return hits[0], nil
	}
	names := make([]string, len(hits))
	for i, ifc := range hits {
		names[i] = ifc.Name
	}
	return Interface{}, fmt.Errorf("find the ipoib interface with %v: %d hold it: %v", ip, len(hits), names)
}

// RDMAPort is the interface as package ibv takes it for a GID choice: its
// name and RDMA port, or, when the port was not found, why (its notes).
func (ifc Interface) RDMAPort() ibv.IPoIBPort {
	p := ibv.IPoIBPort{Netdev: ifc.Name, Device: ifc.Device, Port: ifc.Port}
	if p.Device == "" || p.Port == 0 {
		p.Device, p.Port = "", 0
		p.Unknown = strings.Join(ifc.Notes, "; ")
		if p.Unknown == "" {
			p.Unknown = "no notes"
		}
	}
	return p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
