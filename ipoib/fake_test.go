package ipoib_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ipoib"
)

// fakeNetlink answers with links, addresses and neighbours built in
// memory, the values package netlink would decode from the kernel.
type fakeNetlink struct {
	links  []netlink.Link
	addrs  map[int][]netlink.Addr
	neighs []netlink.Neigh

	linkErr     error
	neighErr    error
	interrupted int // dumps to answer with ErrDumpInterrupted first
	dumps       int
}

var _ ipoib.Netlink = (*fakeNetlink)(nil)

func (f *fakeNetlink) LinkList() ([]netlink.Link, error) {
	f.dumps++
	if f.interrupted > 0 {
		f.interrupted--
		return f.links[:len(f.links)/2], netlink.ErrDumpInterrupted
	}
	return f.links, f.linkErr
}

func (f *fakeNetlink) AddrList(l netlink.Link, family int) ([]netlink.Addr, error) {
	if family != netlink.FAMILY_ALL {
		return nil, errors.New("fake: only FAMILY_ALL")
	}
	return f.addrs[l.Attrs().Index], nil
}

// NeighList filters by link as the kernel's filtered dump does.
func (f *fakeNetlink) NeighList(index, family int) ([]netlink.Neigh, error) {
	if f.neighErr != nil {
		return nil, f.neighErr
	}
	var out []netlink.Neigh
	for _, n := range f.neighs {
		if n.LinkIndex == index && (family == netlink.FAMILY_ALL || family == n.Family) {
			out = append(out, n)
		}
	}
	return out, nil
}

func mac(t testing.TB, s string) net.HardwareAddr {
	t.Helper()
	if s == "" {
		return nil
	}
	a, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// ipoibLink is a link as package netlink decodes an ipoib netdev's
// RTM_NEWLINK: kind "ipoib" with IFLA_IPOIB_* data, type
// ARPHRD_INFINIBAND.
func ipoibLink(t testing.TB, index, parent int, name, addr string, mtu int, pkey uint16, mode netlink.IPoIBMode) *netlink.IPoIB {
	return &netlink.IPoIB{
		LinkAttrs: netlink.LinkAttrs{
			Index: index, ParentIndex: parent, Name: name, MTU: mtu, HardwareAddr: mac(t, addr),
			EncapType: ipoib.EncapInfiniband, OperState: netlink.OperUp,
		},
		Pkey: pkey,
		Mode: mode,
	}
}

// otherLinks are what every machine has besides its IPoIB interfaces.
func otherLinks(t testing.TB) []netlink.Link {
	return []netlink.Link{
		&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo", MTU: 65536, EncapType: "loopback", HardwareAddr: mac(t, "00:00:00:00:00:00")}},
		&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 2, Name: "eth0", MTU: 1500, EncapType: "ether", HardwareAddr: mac(t, "18:03:73:ff:b4:5a")}},
	}
}

func addr(t testing.TB, s string) netlink.Addr {
	t.Helper()
	p := netip.MustParsePrefix(s)
	return netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}

func neigh(t testing.TB, index int, ip string, state int, lladdr string) netlink.Neigh {
	t.Helper()
	a := netip.MustParseAddr(ip)
	fam := netlink.FAMILY_V4
	if a.Is6() {
		fam = netlink.FAMILY_V6
	}
	return netlink.Neigh{LinkIndex: index, Family: fam, State: state, IP: a.AsSlice(), HardwareAddr: mac(t, lladdr)}
}
