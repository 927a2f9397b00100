package doctor

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/prometheus/procfs"
)

// checkSysctls checks the two sysctls that silently drop RoCE packets on
// each interface that carries RoCE: strict reverse-path filtering (a peer
// whose route back leaves by another interface: asymmetric routes, rxe
// devices looped on one host), and accept_local=0 where two local RoCE
// devices talk to each other (the kernel drops packets from its own
// addresses as martians before rxe sees them).
func (h *host) checkSysctls(nets []netTarget) {
	proc, err := procfs.NewFS(filepath.Join(h.o.Root, "proc"))
	if err != nil {
		h.finding("rp_filter", "host", nil, Warn, fmt.Sprintf("procfs unreadable: %v", err), "")
		return
	}
	local := h.softRoCENetdevs()
	for _, t := range nets {
		if h.ifType(t.name) != arphrdEther && t.netns == "" {
			continue
		}
		var all, rp, accept []int
		err := h.sys.InNetns(t.netns, func() error {
			var errs [3]error
			all, errs[0] = proc.SysctlInts("net.ipv4.conf.all.rp_filter")
			rp, errs[1] = proc.SysctlInts("net.ipv4.conf." + t.name + ".rp_filter")
			accept, errs[2] = proc.SysctlInts("net.ipv4.conf." + t.name + ".accept_local")
			for _, e := range errs {
				if e != nil {
					return e
				}
			}
			return nil
		})
		if err != nil || len(all) != 1 || len(rp) != 1 || len(accept) != 1 {
			h.finding("rp_filter", t.name, t.leg, Warn, fmt.Sprintf("net.ipv4.conf sysctls unreadable: %v", err), "")
			continue
		}
		// The kernel applies the larger of all and the interface's.
		eff := max(all[0], rp[0])
		name := map[int]string{0: "off", 1: "strict", 2: "loose"}[eff]
		if eff == 1 {
			h.finding("rp_filter", t.name, t.leg, Warn,
				fmt.Sprintf("rp_filter %d (strict; all=%d, %s=%d): RoCE packets from a peer whose route back leaves by another interface are dropped before RoCE sees them", eff, all[0], t.name, rp[0]),
				fmt.Sprintf("sysctl -w net.ipv4.conf.all.rp_filter=2 net.ipv4.conf.%s.rp_filter=2 (loose) where routes are asymmetric; 0 for RoCE devices looped on one host", t.name))
		} else {
			h.finding("rp_filter", t.name, t.leg, OK, fmt.Sprintf("rp_filter %d (%s)", eff, name), "")
		}
		if len(local) < 2 {
			continue
		}
		if accept[0] == 0 && contains(local, t.name) {
			h.finding("accept_local", t.name, t.leg, Warn,
				fmt.Sprintf("accept_local 0 with Soft-RoCE devices on %s of this host: packets between two local RoCE devices are dropped as martians (from a local address)", strings.Join(local, ", ")),
				fmt.Sprintf("sysctl -w net.ipv4.conf.%s.accept_local=1, and rp_filter 0, where local RoCE devices talk to each other (rxe on veth pairs)", t.name))
		} else if contains(local, t.name) {
			h.finding("accept_local", t.name, t.leg, OK, fmt.Sprintf("accept_local %d", accept[0]), "")
		}
	}
}

// softRoCENetdevs lists the netdevs under this host's rxe devices (the
// netdevs of their RoCEv2 GIDs): two of them on one host reach each other
// only over a wire the kernel must be told to use.
func (h *host) softRoCENetdevs() []string {
	seen := map[string]bool{}
	for _, dev := range h.rdmaDevices() {
		if h.rdmaKind(dev) != "rxe" {
			continue
		}
		for _, p := range h.ports(dev) {
			for _, g := range h.gids(dev, p) {
				if g.typ == gidTypeRoCEv2 && g.ndev != "" {
					seen[g.ndev] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
