package doctor

import (
	"fmt"
	"path/filepath"
	"strings"
)

// GID types as sysfs names them (gid_attrs/types/N).
const (
	gidTypeRoCEv2 = "RoCE v2"
	gidTypeV1     = "IB/RoCE v1" // IB on InfiniBand ports, RoCE v1 on Ethernet ones
)

func (t rdmaTarget) subject() string { return fmt.Sprintf("%s/%d", t.dev, t.port) }

func (h *host) portFile(t rdmaTarget, name string) string {
	return filepath.Join("sys/class/infiniband", t.dev, "ports", fmt.Sprint(t.port), name)
}

// linkLayer is "Ethernet" or "InfiniBand" (ports/N/link_layer).
func (h *host) linkLayer(t rdmaTarget) string {
	s, _ := h.read(h.portFile(t, "link_layer"))
	return s
}

// iwarp reports whether the device is an iWARP RNIC (siw, and hardware
// iWARP): node_type "4: RNIC". Its GIDs carry no RoCE type.
func (h *host) iwarp(dev string) bool {
	s, _ := h.read(filepath.Join("sys/class/infiniband", dev, "node_type"))
	return strings.HasPrefix(s, "4:")
}

// checkGIDs checks each port's state and the GID each leg uses: on an
// Ethernet port the leg's IP must have a RoCEv2 GID (a RoCE v1 one is what
// tools given the wrong GID index end up on), and the index is named, as
// perftest -x and NCCL_IB_GID_INDEX want it.
func (h *host) checkGIDs(ts []rdmaTarget) {
	for _, t := range ts {
		subj := t.subject()
		state, err := h.read(h.portFile(t, "state"))
		switch {
		case err != nil:
			h.finding("port", subj, t.leg, Error, fmt.Sprintf("port state unreadable: %v", err), "")
		case !strings.Contains(state, "ACTIVE"):
			h.finding("port", subj, t.leg, Error, fmt.Sprintf("port state %q: not ACTIVE, nothing passes", state),
				"Ethernet: bring the netdev up (ip link set IF up) and check the link; InfiniBand: check the cable and that a subnet manager runs (sminfo)")
		default:
			h.finding("port", subj, t.leg, OK, fmt.Sprintf("port ACTIVE, link layer %s", h.linkLayer(t)), "")
		}
		if h.iwarp(t.dev) {
			h.finding("gid", subj, t.leg, OK, "iWARP device: its GIDs carry no RoCE type, rdma_cm resolves peers by IP (two-sided operations through rdma_cm only)", "")
			continue
		}
		gs := h.gids(t.dev, t.port)
		if h.linkLayer(t) == "InfiniBand" {
			switch {
			case len(gs) == 0:
				h.finding("gid", subj, t.leg, Error, "InfiniBand port without a GID: the subnet manager has not configured it", "check that a subnet manager runs (sminfo, opensm)")
			case t.ipoib != "" && gs[0].index != 0:
				h.finding("gid", subj, t.leg, Error, fmt.Sprintf("%v is on IPoIB interface %s, on this port, which has no GID at index 0, the one a verbs leg there uses", t.leg.IP, t.ipoib),
					"check that a subnet manager runs (sminfo, opensm)")
			case t.ipoib != "":
				h.finding("gid", subj, t.leg, OK, fmt.Sprintf("InfiniBand GID index %d %v: %v is on IPoIB interface %s, on this port; the leg uses its GID index 0", gs[0].index, gs[0].addr, t.leg.IP, t.ipoib), "")
			default:
				h.finding("gid", subj, t.leg, OK, fmt.Sprintf("InfiniBand GID index %d %v", gs[0].index, gs[0].addr), "")
			}
			continue
		}
		if t.leg != nil {
			h.checkLegGID(t, gs)
			continue
		}
		var v2, v1 []string
		for _, g := range gs {
			if g.addr.Unmap().IsLinkLocalUnicast() {
				continue
			}
			d := fmt.Sprintf("index %d %v (%s)", g.index, g.addr, g.ndev)
			switch g.typ {
			case gidTypeRoCEv2:
				v2 = append(v2, d)
			default:
				v1 = append(v1, d)
			}
		}
		switch {
		case len(v2) > 0:
			h.finding("gid", subj, nil, OK, "RoCEv2 GIDs of IP addresses: "+strings.Join(v2, ", "),
				"")
		case len(v1) > 0:
			h.finding("gid", subj, nil, Error, "IP addresses with RoCE v1 GIDs only: "+strings.Join(v1, ", ")+"; RoCEv2 (routable, UDP 4791) is what rbridge and rdma_cm's peers speak",
				"enable RoCEv2 on the device (mlx5: cma_roce_mode -d DEV -p PORT -m 2; the kernel then lists a RoCE v2 GID per address)")
		default:
			h.finding("gid", subj, nil, Warn, "no GID for an IP address, only link-local ones: rdma_cm cannot reach this port by IP",
				"put an IP address on the port's netdev (ip addr add ADDR dev IF); the kernel adds its GIDs")
		}
	}
}

// checkLegGID finds the GIDs of the leg's IP on its port.
func (h *host) checkLegGID(t rdmaTarget, gs []gidEntry) {
	subj := t.subject()
	var v2 *gidEntry
	var others []string
	for i := range gs {
		g := &gs[i]
		if g.addr.Unmap() != t.leg.IP {
			continue
		}
		if g.typ == gidTypeRoCEv2 && v2 == nil {
			v2 = g
			continue
		}
		others = append(others, fmt.Sprintf("index %d (%s)", g.index, orUnknown(g.typ)))
	}
	if v2 == nil {
		h.finding("gid", subj, t.leg, Error, fmt.Sprintf("%v has no RoCEv2 GID on %s (only %s): the leg cannot speak RoCEv2", t.leg.IP, subj, orNone(others)),
			"enable RoCEv2 on the device (mlx5: cma_roce_mode -d DEV -p PORT -m 2)")
		return
	}
	msg := fmt.Sprintf("%v is RoCEv2 GID index %d (%v on %s)", t.leg.IP, v2.index, v2.addr, v2.ndev)
	if len(others) > 0 {
		msg += "; also " + strings.Join(others, ", ") + ", which are not RoCEv2"
	}
	fix := ""
	if v2.index != 0 {
		fix = fmt.Sprintf("rbridge picks index %d itself; tools given an index by hand (perftest -x, NCCL_IB_GID_INDEX) need %d too, not 0 (the link-local GID)", v2.index, v2.index)
	}
	h.finding("gid", subj, t.leg, OK, msg, fix)
}

func orUnknown(s string) string {
	if s == "" {
		return "type unknown"
	}
	return s
}
