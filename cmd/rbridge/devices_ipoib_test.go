package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
)

// fixtureNetlink answers with the links of ipoib's mlx4 fixture tree: two
// ports of a ConnectX-3, ib0 in connected mode, ib1 in datagram mode, and
// one neighbour on ib0.
type fixtureNetlink struct{ t *testing.T }

func (f fixtureNetlink) link(index int, name, addr string, mtu int) netlink.Link {
	a, err := net.ParseMAC(addr)
	if err != nil {
		f.t.Fatal(err)
	}
	return &netlink.IPoIB{LinkAttrs: netlink.LinkAttrs{Index: index, Name: name, MTU: mtu, HardwareAddr: a,
		EncapType: ipoib.EncapInfiniband, OperState: netlink.OperUp}}
}

func (f fixtureNetlink) LinkList() ([]netlink.Link, error) {
	return []netlink.Link{
		&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo", EncapType: "loopback"}},
		f.link(6, "ib0", "80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1", 65520),
		f.link(7, "ib1", "80:00:0a:29:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b2", 2044),
	}, nil
}

func (fixtureNetlink) AddrList(l netlink.Link, _ int) ([]netlink.Addr, error) {
	if l.Attrs().Index != 6 {
		return nil, nil
	}
	return []netlink.Addr{{IPNet: &net.IPNet{IP: net.IPv4(172, 31, 0, 181).To4(), Mask: net.CIDRMask(24, 32)}}}, nil
}

func (f fixtureNetlink) NeighList(index, _ int) ([]netlink.Neigh, error) {
	if index != 6 {
		return nil, nil
	}
	a, _ := net.ParseMAC("80:00:0a:2a:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:c0:a1")
	return []netlink.Neigh{{LinkIndex: 6, State: netlink.NUD_REACHABLE, IP: net.IPv4(172, 31, 0, 186).To4(), HardwareAddr: a}}, nil
}

// TestDevicesIPoIB: the IPoIB part of `rbridge devices` on a host with two
// IPoIB interfaces (ipoib's crafted mlx4 sysfs tree and the links such a
// host's netlink gives): each with its mode, MTU, P_Key, GID and RDMA
// device and port, and ib0's neighbour. With the binding the RDMA part
// comes first; without it the IPoIB part is written and ibv's reason
// returned.
func TestDevicesIPoIB(t *testing.T) {
	newHost := func([]ibv.DeviceInfo) *ipoib.Host {
		return ipoib.NewHost(ipoib.Options{Netlink: fixtureNetlink{t}, Root: os.DirFS("../../ipoib/testdata/mlx4")})
	}
	var b bytes.Buffer
	err := writeDevices(&b, false, newHost)
	if err != nil && !errors.Is(err, ibv.ErrNotSupported) {
		t.Fatal(err)
	}
	for _, want := range []string{
		"IPoIB interfaces:\n",
		"  ib0 (index 6): mlx4_0 port 1, up, connected mode, MTU 65520, P_Key 0xffff, umcast 0\n",
		"    GID fe80::f452:1403:7b:e1b1, QPN 0x000a28, flags RC, address 80:00:0a:28:fe:80:00:00:00:00:00:00:f4:52:14:03:00:7b:e1:b1\n",
		"    addresses: 172.31.0.181/24\n",
		"    neighbour 172.31.0.186: REACHABLE, GID fe80::f452:1403:7b:c0a1, QPN 0x000a2a, connected\n",
		"  ib1 (index 7): mlx4_0 port 2, up, datagram mode, MTU 2044, P_Key 0xffff, umcast 1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("devices lacks %q:\n%s", want, b.String())
		}
	}

	b.Reset()
	err = writeDevices(&b, true, newHost)
	if err != nil && !errors.Is(err, ibv.ErrNotSupported) {
		t.Fatal(err)
	}
	var got struct {
		IPoIB struct {
			Interfaces []struct {
				Name   string `json:"name"`
				Mode   string `json:"mode"`
				MTU    int    `json:"mtu"`
				PKey   string `json:"pkey"`
				GID    string `json:"gid"`
				Device string `json:"device"`
				Port   int    `json:"port"`
			} `json:"interfaces"`
		} `json:"ipoib"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("devices --json: %v in %s", err, b.String())
	}
	ifs := got.IPoIB.Interfaces
	if len(ifs) != 2 || ifs[0].Name != "ib0" || ifs[0].Mode != "connected" || ifs[0].MTU != 65520 || ifs[0].PKey != "0xffff" ||
		ifs[0].GID != "fe80::f452:1403:7b:e1b1" || ifs[0].Device != "mlx4_0" || ifs[0].Port != 1 || ifs[1].Port != 2 {
		t.Errorf("devices --json ipoib = %+v", ifs)
	}
}

// TestDevicesIPoIBGIDChoice: in `rbridge devices`, an address on an IPoIB
// interface gets the GID a verbs leg with that ip would use, GID index 0
// of the interface's port (from ipoib's mlx4 fixture: ib0 on mlx4_0 port
// 1), and an address on another netdev is left to the RoCE choice.
func TestDevicesIPoIBGIDChoice(t *testing.T) {
	ib, err := ipoib.NewHost(ipoib.Options{Netlink: fixtureNetlink{t}, Root: os.DirFS("../../ipoib/testdata/mlx4")}).Report()
	if err != nil {
		t.Fatal(err)
	}
	addrs := withIPoIBPorts([]ibv.LocalAddr{
		{Netdev: "ib0", IP: netip.MustParseAddr("172.31.0.181")},
		{Netdev: "eth0", IP: netip.MustParseAddr("10.0.0.1")},
	}, ib)
	if p := addrs[0].IPoIB; p == nil || *p != (ibv.IPoIBPort{Netdev: "ib0", Device: "mlx4_0", Port: 1}) {
		t.Errorf("ib0's address: IPoIB port %+v, want ib0 on mlx4_0 port 1", p)
	}
	if p := addrs[1].IPoIB; p != nil {
		t.Errorf("eth0's address: IPoIB port %+v, want none", p)
	}
	g, _ := ibv.ParseGID("fe80::f452:1403:7b:e1b1")
	devs := []ibv.DeviceInfo{{Name: "mlx4_0", Transport: ibv.TransportIB, Ports: []ibv.PortInfo{{Port: 1, LinkLayer: ibv.LinkLayerInfiniBand,
		GIDs: []ibv.GIDEntry{{Device: "mlx4_0", Port: 1, Index: 0, GID: g, Type: ibv.GIDTypeIB}}}}}}
	var b bytes.Buffer
	if err := ibv.BuildDevicesReport(devs, addrs).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := "  172.31.0.181 (ib0): mlx4_0 port 1 index 0 (fe80::f452:1403:7b:e1b1): IPoIB netdev ib0 on mlx4_0 port 1: the port's GID index 0; the IP is reached through IPoIB\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("devices lacks\n%s\nin\n%s", want, b.String())
	}
}
