package ibv

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"
)

// ReportOptions shape the `rbridge devices` report.
type ReportOptions struct {
	JSON bool // one JSON object instead of text
}

// DevicesReport is the content of `rbridge devices`: every RDMA device with
// its ports and GIDs, and for each local IP address the GID rbridge would
// use and why.
type DevicesReport struct {
	Devices []DeviceInfo `json:"devices"`
	Choices []IPChoice   `json:"gid_choices"`
	// Note says, in one sentence, why there is nothing to report: no RDMA
	// devices (none, or no RDMA support in the kernel).
	Note string `json:"note,omitempty"`
}

// IPChoice is the GID choice for one local address.
type IPChoice struct {
	IP     string    `json:"ip"`
	Netdev string    `json:"netdev"`
	GID    *GIDEntry `json:"gid,omitempty"` // nil when there is none
	Reason string    `json:"reason"`
}

// LocalAddr is an IP address and the netdev that holds it.
type LocalAddr struct {
	Netdev string
	IP     netip.Addr
	// IPoIB is the RDMA port under Netdev when it is an IPoIB netdev (the
	// caller finds it: package ipoib); nil otherwise.
	IPoIB *IPoIBPort
	// MAC is Netdev's hardware address (an iWARP device's GID is it).
	MAC net.HardwareAddr
}

// WriteDevicesReport queries the machine (QueryDevices, the local IP
// addresses) and writes the `rbridge devices` report to w, as text or JSON.
// It does not know the RDMA ports under IPoIB netdevs (package ipoib does,
// above this one): their addresses get no GID here; `rbridge devices`
// finds those ports and calls BuildDevicesReport itself.
// A machine without RDMA devices is not an error: the report says so
// plainly. A build without RDMA support cannot look, and says so with an
// error matching ErrNotSupported, writing nothing; a failed query or write
// is an error too.
func WriteDevicesReport(w io.Writer, opts ReportOptions) error {
	devs, err := QueryDevices()
	if err != nil {
		return fmt.Errorf("list RDMA devices: %w", err)
	}
	addrs, err := LocalAddrs()
	if err != nil {
		return err
	}
	rep := BuildDevicesReport(devs, addrs)
	if opts.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(w)
}

// LocalAddrs lists the IP addresses of the machine's up, non-loopback
// netdevs (IPoIB is left nil).
func LocalAddrs() ([]LocalAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list netdevs: %w", err)
	}
	var out []LocalAddr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 || ifc.Flags&net.FlagUp == 0 {
			continue
		}
		as, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range as {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			out = append(out, LocalAddr{Netdev: ifc.Name, IP: pfx.Addr(), MAC: ifc.HardwareAddr})
		}
	}
	return out, nil
}

// BuildDevicesReport assembles the report from devices and local addresses:
// for each address, the GID ChooseGID picks among the GIDs on the address's
// own netdev, or for an address on an IPoIB netdev (LocalAddr.IPoIB) GID
// index 0 of the netdev's port, or on an iWARP device's netdev that
// device's GID (LocalAddr.MAC): what a verbs leg with that ip would use.
func BuildDevicesReport(devs []DeviceInfo, addrs []LocalAddr) DevicesReport {
	rep := DevicesReport{Devices: devs, Choices: []IPChoice{}}
	if rep.Devices == nil {
		rep.Devices = []DeviceInfo{}
	}
	if len(devs) == 0 {
		rep.Note = "no RDMA devices found"
		return rep
	}
	var table []GIDEntry
	for _, d := range devs {
		for _, p := range d.Ports {
			table = append(table, p.GIDs...)
		}
	}
	for _, a := range addrs {
		c := IPChoice{IP: a.IP.String(), Netdev: a.Netdev}
		ch, err := ChooseGID(table, GIDQuery{IP: a.IP, Netdev: a.Netdev, IPoIB: a.IPoIB, MAC: a.MAC, MACNetdev: a.Netdev})
		if err != nil {
			c.Reason = err.Error()
		} else {
			e := ch.GIDEntry
			c.GID = &e
			c.Reason = ch.Reason
		}
		rep.Choices = append(rep.Choices, c)
	}
	return rep
}

// WriteText writes the report as text for an operator.
func (r DevicesReport) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.Note != "" {
		fmt.Fprintf(&b, "%s\n", r.Note)
	}
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "%s: transport %s, node_guid %s, vendor 0x%x part %d, fw %q\n",
			d.Name, d.Transport, d.NodeGUID, d.VendorID, d.VendorPartID, d.FirmwareVersion)
		fmt.Fprintf(&b, "  max_qp %d  max_qp_wr %d  max_cqe %d  max_mr_size %d  max_sge %d  max_qp_rd_atom %d  atomic %s\n",
			d.Attr.MaxQP, d.Attr.MaxQPWR, d.Attr.MaxCQE, d.Attr.MaxMRSize, d.Attr.MaxSGE, d.Attr.MaxQPRdAtom, d.Attr.AtomicCap)
		fmt.Fprintf(&b, "  memory windows: max_mw %d, type 1 %s, type 2 %s\n", d.Attr.MaxMW, yesNo(d.Attr.MWType1()), yesNo(d.Attr.MWType2()))
		for _, p := range d.Ports {
			fmt.Fprintf(&b, "  port %d: %s (%s), link layer %s, active MTU %s (max %s), lid %d, sm_lid %d, speed %s, width %s\n",
				p.Port, p.State, p.PhysState, p.LinkLayer, p.ActiveMTU, p.MaxMTU, p.LID, p.SMLID, p.Speed, p.Width)
			if len(p.GIDs) == 0 {
				fmt.Fprintf(&b, "    no valid GIDs (of %d slots)\n", p.GIDTableLen)
				continue
			}
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "    index\tgid\ttype\tnetdev\n")
			for _, g := range p.GIDs {
				nd := g.Netdev
				if nd == "" {
					nd = "-"
				}
				fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\n", g.Index, g.GID, g.Type, nd)
			}
			tw.Flush()
		}
	}
	if len(r.Devices) > 0 {
		if len(r.Choices) == 0 {
			b.WriteString("no local IP addresses (up, not loopback) to choose a GID for\n")
		} else {
			b.WriteString("GID a verbs leg would use, per local IP (RoCEv2 on an Ethernet port; GID index 0 of the port under an IPoIB netdev):\n")
			for _, c := range r.Choices {
				if c.GID == nil {
					fmt.Fprintf(&b, "  %s (%s): none: %s\n", c.IP, c.Netdev, c.Reason)
					continue
				}
				fmt.Fprintf(&b, "  %s (%s): %s port %d index %d (%s): %s\n",
					c.IP, c.Netdev, c.GID.Device, c.GID.Port, c.GID.Index, c.GID.GID, c.Reason)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
