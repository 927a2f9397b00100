package doctor

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/rbridge/rbridge/bridge/config"
)

// Drivers with native XDP in Linux 6.x (their own ndo_bpf), and those of
// them whose AF_XDP sockets can be zero-copy (ndo_xsk_wakeup). The rest run
// XDP in generic mode only: after the kernel built an skb for each packet,
// at about the speed of the kernel stack.
var (
	nativeXDP = map[string]bool{
		"mlx5_core": true, "mlx4_core": true, "mlx4_en": true, "i40e": true, "ice": true, "ixgbe": true, "ixgbevf": true,
		"igb": true, "igc": true, "bnxt_en": true, "nfp": true, "qede": true, "ena": true, "virtio_net": true, "veth": true,
		"tun": true, "netsec": true, "mvneta": true, "mvpp2": true, "stmmac": true, "dpaa2-eth": true, "sfc": true,
		"nicvf": true, "hv_netvsc": true, "gve": true, "fec": true, "enetc": true, "bond": true, "cpsw": true, "idpf": true,
	}
	zeroCopyXSK = map[string]bool{
		"mlx5_core": true, "i40e": true, "ice": true, "ixgbe": true, "igc": true, "stmmac": true, "gve": true, "idpf": true,
	}
)

// driverName is the interface's driver: the device/driver link in sysfs,
// else what ethtool says (virtual devices have no device link).
func (h *host) driverName(t netTarget) string {
	if l, err := fs.ReadLink(h.fsys, netPath(t.name, "device", "driver")); err == nil {
		return filepath.Base(l)
	}
	var d string
	err := h.sys.InNetns(t.netns, func() (err error) {
		d, err = h.sys.Driver(t.name)
		return err
	})
	if err != nil || d == "" {
		return "an unknown driver"
	}
	return d
}

// checkXDP names the XDP mode the driver of each AF_XDP leg's interface
// (each Ethernet interface, without a config) supports.
func (h *host) checkXDP(nets []netTarget) {
	for _, t := range nets {
		if t.leg != nil && !t.userspace {
			continue
		}
		if t.leg != nil && t.leg.IO == config.IOUDP {
			h.finding("xdp", t.name, t.leg, OK, "io udp: the leg uses a UDP socket, not XDP", "")
			continue
		}
		if !h.visible(t, "xdp") || h.ifType(t.name) != arphrdEther {
			continue
		}
		drv := h.driverName(t)
		switch {
		case nativeXDP[drv] && zeroCopyXSK[drv]:
			h.finding("xdp", t.name, t.leg, OK, fmt.Sprintf("driver %s: native XDP, AF_XDP zero-copy", drv), "")
		case nativeXDP[drv]:
			h.finding("xdp", t.name, t.leg, OK, fmt.Sprintf("driver %s: native XDP, AF_XDP in copy mode (no zero-copy in this driver)", drv), "")
		default:
			msg := fmt.Sprintf("driver %s: no native XDP, only generic mode (every packet is copied into an skb first, at about the kernel stack's speed)", drv)
			if t.leg == nil { // nothing asks for XDP on it
				h.finding("xdp", t.name, nil, OK, msg, "")
				continue
			}
			h.finding("xdp", t.name, t.leg, Warn, msg,
				"put the userspace leg on a NIC with native XDP (mlx5, ice, i40e, ...), or use io: udp, which costs about the same here")
		}
		if t.leg != nil {
			h.checkQueues(t)
		}
	}
}

// checkQueues compares an AF_XDP leg's queues with the receive queues its
// interface has (sysfs queues/rx-*, what RSS spreads packets over): the
// leg binds a socket on queues 0 to queues-1, every one by default, and
// what reaches a queue without one goes to the kernel.
func (h *host) checkQueues(t netTarget) {
	ents, err := fs.ReadDir(h.fsys, netPath(t.name, "queues"))
	if err != nil {
		return
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "rx-") {
			n++
		}
	}
	if n == 0 {
		return
	}
	q := t.leg.Queues
	switch {
	case q == 0:
		h.finding("xdp", t.name, t.leg, OK, fmt.Sprintf("%d receive queues: the leg binds an AF_XDP socket and runs a receive loop on each", n), "")
	case q > n:
		h.finding("xdp", t.name, t.leg, Error, fmt.Sprintf("queues %d, but %s has %d receive queues: the leg does not start", q, t.name, n),
			fmt.Sprintf("queues: %d, or no queues key (every receive queue)", n))
	case q < n:
		h.finding("xdp", t.name, t.leg, Warn, fmt.Sprintf("queues %d of the %d receive queues %s has: what RSS puts on the other %d goes to the kernel, and those connections fail", q, n, t.name, n-q),
			fmt.Sprintf("ethtool -X %s equal %d (RSS over the first %d queues only), or no queues key", t.name, q, q))
	default:
		h.finding("xdp", t.name, t.leg, OK, fmt.Sprintf("queues %d: an AF_XDP socket on each of the %d receive queues", q, n), "")
	}
}

// checkKernelRoCE finds kernel RDMA devices bound to a userspace leg's
// interface: a kernel RoCE device takes UDP 4791 on its netdev before XDP
// sees the packets (and holds the port a UDP leg would bind).
func (h *host) checkKernelRoCE(nets []netTarget) {
	for _, t := range nets {
		if !t.userspace {
			continue
		}
		if _, err := fs.Stat(h.fsys, netPath(t.name)); err != nil {
			continue // visible() already said why
		}
		var bound []string
		for _, dev := range h.rdmaDevices() {
			if !h.boundTo(dev, t.name) {
				continue
			}
			bound = append(bound, dev)
			switch kind := h.rdmaKind(dev); kind {
			case "rxe":
				h.finding("kernel_roce", t.name, t.leg, Error,
					fmt.Sprintf("%s (Soft-RoCE) is bound to %s: the kernel's RoCE takes UDP 4791 there before XDP sees it", dev, t.name),
					fmt.Sprintf("rdma link delete %s", dev))
			case "iwarp":
				h.finding("kernel_roce", t.name, t.leg, OK, fmt.Sprintf("%s (iWARP) is bound to %s: it speaks TCP, not UDP 4791", dev, t.name), "")
			default:
				pci := "pci/" + h.pciAddr(t.name)
				h.finding("kernel_roce", t.name, t.leg, Error,
					fmt.Sprintf("%s (%s) has RoCE enabled on %s: the NIC's RoCE engine takes UDP 4791 before XDP sees it", dev, kind, t.name),
					fmt.Sprintf("devlink dev param set %s name enable_roce value false cmode driverinit; devlink dev reload %s", pci, pci))
			}
		}
		if len(bound) == 0 {
			h.finding("kernel_roce", t.name, t.leg, OK, fmt.Sprintf("no kernel RoCE device on %s: UDP 4791 is rbridge's", t.name), "")
		}
	}
}

// boundTo reports whether the RDMA device sits on the netdev: rxe's parent,
// a GID of the netdev, or the same PCI function.
func (h *host) boundTo(dev, ifname string) bool {
	if p, err := h.read(filepath.Join("sys/class/infiniband", dev, "parent")); err == nil && p == ifname {
		return true
	}
	for _, p := range h.ports(dev) {
		for _, g := range h.gids(dev, p) {
			if g.ndev == ifname {
				return true
			}
		}
	}
	a, aerr := fs.ReadLink(h.fsys, filepath.Join("sys/class/infiniband", dev, "device"))
	b, berr := fs.ReadLink(h.fsys, netPath(ifname, "device"))
	return aerr == nil && berr == nil && filepath.Base(a) == filepath.Base(b)
}

// rdmaKind is "rxe", "iwarp", or the device's driver (mlx5_core, ...).
func (h *host) rdmaKind(dev string) string {
	if _, err := fs.Stat(h.fsys, filepath.Join("sys/class/infiniband", dev, "parent")); err == nil || strings.HasPrefix(dev, "rxe") {
		return "rxe"
	}
	if h.iwarp(dev) {
		return "iwarp"
	}
	if l, err := fs.ReadLink(h.fsys, filepath.Join("sys/class/infiniband", dev, "device", "driver")); err == nil {
		return filepath.Base(l)
	}
	return "a RoCE NIC"
}

// pciAddr is the PCI address of the interface's device, or a placeholder.
func (h *host) pciAddr(ifname string) string {
	if l, err := fs.ReadLink(h.fsys, netPath(ifname, "device")); err == nil {
		return filepath.Base(l)
	}
	return "PCI_ADDRESS"
}
