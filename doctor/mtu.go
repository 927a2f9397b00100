package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rbridge/rbridge/ibv"
)

// checkMTU checks each Ethernet leg's MTU and the RoCE MTU it carries (the
// largest IB MTU that fits once the RoCEv2 headers are off, as the kernel
// computes it), then names each leg's, since a message crosses the gateway
// at each leg's own MTU.
func (h *host) checkMTU(nets []netTarget, rdmas []rdmaTarget) {
	perLeg := map[string]string{}
	for _, t := range nets {
		if t.leg == nil && h.ifType(t.name) != arphrdEther {
			continue
		}
		if !h.visible(t, "mtu") {
			continue
		}
		mtu, err := h.readInt(netPath(t.name, "mtu"))
		if err != nil {
			h.finding("mtu", t.name, t.leg, Error, fmt.Sprintf("MTU unreadable: %v", err), "")
			continue
		}
		rm := ibv.MTUForNetdev(int(mtu))
		if t.leg != nil {
			perLeg[t.leg.Name] = rm.String()
		}
		switch {
		case !rm.Valid():
			h.finding("mtu", t.name, t.leg, Error, fmt.Sprintf("MTU %d leaves no room for a 256-byte RoCE payload after the RoCEv2 headers", mtu),
				"set the MTU to 1500 or more on the interface and every hop (ip link set IF mtu 1500)")
		case rm < ibv.MTU1024:
			h.finding("mtu", t.name, t.leg, Warn, fmt.Sprintf("MTU %d: RoCE MTU %v, below the 1024 every RoCE peer takes", mtu, rm),
				"raise the MTU to 1500 or more on the interface and every hop")
		case rm < ibv.MTU4096:
			h.finding("mtu", t.name, t.leg, OK, fmt.Sprintf("MTU %d: RoCE MTU %v", mtu, rm),
				fmt.Sprintf("for RoCE MTU 4096 set an MTU of %d or more (9000 is usual) on the interface, its peers and every switch hop", 4096+96))
		default:
			h.finding("mtu", t.name, t.leg, OK, fmt.Sprintf("MTU %d: RoCE MTU %v", mtu, rm), "")
		}
	}
	for _, t := range rdmas {
		if t.leg != nil && h.linkLayer(t) == "InfiniBand" {
			perLeg[t.leg.Name] = "the IB port's active MTU"
			h.finding("mtu", t.subject(), t.leg, OK, "InfiniBand port: its MTU is the subnet's (ibv_devinfo shows active_mtu); rbridge uses the minimum of both ends per connection", "")
		}
	}
	if len(perLeg) >= 2 {
		names := make([]string, 0, len(perLeg))
		for n := range perLeg {
			names = append(names, n)
		}
		sort.Strings(names)
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %s", n, perLeg[n]))
		}
		h.finding("mtu", "legs", nil, OK, "RoCE MTU per leg: "+strings.Join(parts, ", ")+"; each leg keeps its own, a connection on a leg uses the minimum of both ends there", "")
	}
}

// checkIPoIB checks every IPoIB interface's mode and MTU: in datagram mode
// the IP MTU is the IB MTU less the 4-byte IPoIB header (2044 or 4092);
// connected mode allows up to 65520 for unicast, multicast stays at the
// datagram MTU.
func (h *host) checkIPoIB() {
	for _, n := range h.netDevices() {
		if h.ifType(n) != arphrdInfiniband {
			continue
		}
		mode, err := h.read(netPath(n, "mode"))
		if err != nil {
			mode = "unknown"
		}
		mtu, err := h.readInt(netPath(n, "mtu"))
		if err != nil {
			h.finding("ipoib", n, nil, Error, fmt.Sprintf("IPoIB MTU unreadable: %v", err), "")
			continue
		}
		switch {
		case mode == "datagram" && mtu < 2044:
			h.finding("ipoib", n, nil, Warn, fmt.Sprintf("IPoIB datagram mode, MTU %d: below the 2044 a 2K IB MTU carries", mtu),
				"set MTU 2044 (2K IB MTU) or 4092 (4K) (ip link set IF mtu 4092), or connected mode (echo connected > /sys/class/net/IF/mode) for up to 65520")
		case mode == "datagram":
			h.finding("ipoib", n, nil, OK, fmt.Sprintf("IPoIB datagram mode, MTU %d", mtu), "")
		case mode == "connected":
			h.finding("ipoib", n, nil, OK, fmt.Sprintf("IPoIB connected mode, MTU %d (multicast stays at the datagram MTU)", mtu), "")
		default:
			h.finding("ipoib", n, nil, Warn, fmt.Sprintf("IPoIB mode %q, MTU %d", mode, mtu), "")
		}
	}
}
