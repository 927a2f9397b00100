package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/prometheus/procfs/sysfs"
)

// checkQoS checks, on each Ethernet interface that carries RoCE, PFC on the
// RoCE priority and DSCP trust (the APP table maps the RoCE DSCP to that
// priority), then ECN for RoCE.
func (h *host) checkQoS(nets []netTarget) {
	prio, dscp := h.o.RoCEPriority, h.o.RoCEDSCP
	for _, t := range nets {
		if !h.visible(t, "pfc") || h.ifType(t.name) != arphrdEther {
			continue
		}
		var d DCB
		err := h.sys.InNetns(t.netns, func() (err error) {
			d, err = h.sys.DCB(t.name)
			return err
		})
		switch {
		case errors.Is(err, ErrNotExposed):
			h.finding("pfc", t.name, t.leg, OK,
				fmt.Sprintf("PFC and DSCP trust: not exposed by this driver (%s has no DCB operations)", h.driverName(t)),
				"nothing to set on this host; where the fabric is lossless, PFC on priority "+fmt.Sprint(prio)+" is the switch port's and the peers' setting")
		case err != nil:
			h.finding("pfc", t.name, t.leg, Warn, fmt.Sprintf("DCB state unreadable: %v", err), "check with dcb pfc show dev "+t.name)
		default:
			h.pfcFindings(t, d, prio, dscp)
		}
		h.checkECN(t, prio)
	}
}

func (h *host) pfcFindings(t netTarget, d DCB, prio, dscp int) {
	if d.PFCEnabled&(1<<prio) != 0 {
		h.finding("pfc", t.name, t.leg, OK, fmt.Sprintf("PFC on for priority %d (enabled bitmap %#02x)", prio, d.PFCEnabled), "")
	} else {
		h.finding("pfc", t.name, t.leg, Warn,
			fmt.Sprintf("PFC off for priority %d, RoCE's (enabled bitmap %#02x): under congestion RoCE packets are dropped and recovered by go-back-N retransmission", prio, d.PFCEnabled),
			fmt.Sprintf("dcb pfc set dev %s prio-pfc %d:on (mlnx_qos -i %s --pfc with priority %d on), and the same on the switch port", t.name, prio, t.name, prio))
	}
	switch p, ok := d.DSCP[uint8(dscp)]; {
	case len(d.DSCP) == 0:
		h.finding("dscp", t.name, t.leg, Warn,
			fmt.Sprintf("the NIC trusts PCP (802.1p), not DSCP: untagged RoCEv2 packets with DSCP %d land on priority 0, not %d", dscp, prio),
			fmt.Sprintf("dcb app add dev %s dscp-prio %d:%d (mlnx_qos -i %s --trust dscp)", t.name, dscp, prio, t.name))
	case !ok:
		h.finding("dscp", t.name, t.leg, Warn, fmt.Sprintf("DSCP trust on, but DSCP %d has no priority in the APP table (priority 0)", dscp),
			fmt.Sprintf("dcb app add dev %s dscp-prio %d:%d", t.name, dscp, prio))
	case int(p) != prio:
		h.finding("dscp", t.name, t.leg, Warn, fmt.Sprintf("DSCP %d maps to priority %d, not RoCE's %d", dscp, p, prio),
			fmt.Sprintf("dcb app replace dev %s dscp-prio %d:%d", t.name, dscp, prio))
	default:
		h.finding("dscp", t.name, t.leg, OK, fmt.Sprintf("DSCP trust: DSCP %d maps to priority %d", dscp, prio), "")
	}
}

// checkECN checks ECN for RoCE: on a NIC whose own RoCE engine carries the
// traffic (mlx5: /sys/class/net/IF/ecn/roce_np and roce_rp, enable/PRIO),
// the notification point must send CNPs and the reaction point slow down.
// rbridge's userspace transport does both itself. net.ipv4.tcp_ecn is
// TCP's and plays no part in RoCE.
func (h *host) checkECN(t netTarget, prio int) {
	if t.userspace {
		h.finding("ecn", t.name, t.leg, OK,
			"ECN for RoCE: rbridge's transport answers ECN-CE with CNPs and slows down on CNPs itself (DCQCN); the NIC's roce_np/roce_rp settings are for its own RoCE engine, net.ipv4.tcp_ecn is TCP's", "")
		return
	}
	dir := netPath(t.name, "ecn")
	if _, err := fs.Stat(h.fsys, dir); err != nil {
		h.finding("ecn", t.name, t.leg, OK,
			fmt.Sprintf("ECN for RoCE: not exposed by this driver (%s has no ecn/roce_np, roce_rp; mlx5 has them); net.ipv4.tcp_ecn is TCP's and does not apply", h.driverName(t)),
			"")
		return
	}
	e, err := sysfs.ParseEcnIfaceInfo(filepath.Join(h.o.Root, dir))
	if err != nil {
		h.finding("ecn", t.name, t.leg, Warn, fmt.Sprintf("ECN for RoCE unreadable: %v", err), "")
		return
	}
	np, rp := e.RoceNpEcn.Ecn[uint8(prio)], e.RoceRpEcn.Ecn[uint8(prio)]
	var off, fixes []string
	if !np {
		off = append(off, "roce_np (CNPs for ECN-CE packets)")
		fixes = append(fixes, fmt.Sprintf("echo 1 > /sys/class/net/%s/ecn/roce_np/enable/%d", t.name, prio))
	}
	if !rp {
		off = append(off, "roce_rp (slowing down on CNPs)")
		fixes = append(fixes, fmt.Sprintf("echo 1 > /sys/class/net/%s/ecn/roce_rp/enable/%d", t.name, prio))
	}
	if len(off) == 0 {
		h.finding("ecn", t.name, t.leg, OK, fmt.Sprintf("ECN for RoCE on for priority %d (roce_np and roce_rp)", prio), "")
		return
	}
	h.finding("ecn", t.name, t.leg, Warn,
		fmt.Sprintf("ECN for RoCE off for priority %d: %s; DCQCN cannot work", prio, joinAnd(off)),
		strings.Join(fixes, "; "))
}

func joinAnd(ss []string) string {
	switch len(ss) {
	case 0:
		return ""
	case 1:
		return ss[0]
	}
	out := ss[0]
	for _, s := range ss[1 : len(ss)-1] {
		out += ", " + s
	}
	return out + " and " + ss[len(ss)-1]
}
