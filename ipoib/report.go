package ipoib

import (
	"fmt"
	"io"
	"strings"
)

// Report is the IPoIB part of `rbridge devices`: every IPoIB interface
// with its neighbours.
type Report struct {
	Interfaces []InterfaceReport `json:"interfaces"`
	// Note says, in one sentence, why there is nothing to report.
	Note string `json:"note,omitempty"`
}

// InterfaceReport is one interface and its neighbour entries.
type InterfaceReport struct {
	Interface
	Neighbors []Neighbor `json:"neighbors"`
}

// NoInterfaces is the report's note on a machine without IPoIB interfaces.
const NoInterfaces = "no IPoIB interfaces"

// Report lists the interfaces and each one's neighbours. A neighbour dump
// that fails goes into that interface's notes; only a failed link dump is
// an error.
func (h *Host) Report() (Report, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return Report{}, err
	}
	r := Report{Interfaces: []InterfaceReport{}}
	if len(ifs) == 0 {
		r.Note = NoInterfaces
	}
	for _, ifc := range ifs {
		ns, err := h.Neighbors(ifc)
		if err != nil {
			ifc.Notes = append(ifc.Notes, err.Error())
		}
		if ns == nil {
			ns = []Neighbor{}
		}
		r.Interfaces = append(r.Interfaces, InterfaceReport{Interface: ifc, Neighbors: ns})
	}
	return r, nil
}

// WriteText writes the report for an operator: one paragraph per
// interface.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.Note != "" {
		fmt.Fprintf(&b, "%s\n", r.Note)
	}
	if len(r.Interfaces) > 0 {
		b.WriteString("IPoIB interfaces:\n")
	}
	for _, ir := range r.Interfaces {
		writeInterface(&b, ir)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeInterface(b *strings.Builder, ir InterfaceReport) {
	ifc := ir.Interface
	where := "RDMA device unknown"
	if ifc.Device != "" {
		where = fmt.Sprintf("%s port %d", ifc.Device, ifc.Port)
	}
	if ifc.Parent != "" {
		where = fmt.Sprintf("P_Key child of %s, %s", ifc.Parent, where)
	}
	fmt.Fprintf(b, "  %s (index %d): %s, %s, %s mode, MTU %d, P_Key %v, umcast %d\n",
		ifc.Name, ifc.Index, where, ifc.OperState, ifc.Mode, ifc.MTU, ifc.PKey, b2i(ifc.Umcast))
	if ifc.HwAddr.IsValid() {
		fmt.Fprintf(b, "    GID %v, QPN 0x%06x, flags %v, address %v\n", ifc.GID, ifc.QPN, ifc.Flags, ifc.HwAddr)
	}
	fmt.Fprintf(b, "    MTU allowed: %s; %s\n", datagramLimit(ifc), connectedLimit(ifc))
	if len(ifc.Addrs) > 0 {
		as := make([]string, len(ifc.Addrs))
		for i, a := range ifc.Addrs {
			as[i] = a.String()
		}
		fmt.Fprintf(b, "    addresses: %s\n", strings.Join(as, ", "))
	}
	for _, n := range ir.Neighbors {
		switch {
		case n.HwAddr == nil:
			fmt.Fprintf(b, "    neighbour %v: %s, %s\n", n.IP, n.State, n.Note)
		case n.Multicast:
			fmt.Fprintf(b, "    neighbour %v: %s, multicast group %v\n", n.IP, n.State, n.GID)
		default:
			how := "datagram"
			if n.Connected {
				how = "connected"
			}
			fmt.Fprintf(b, "    neighbour %v: %s, GID %v, QPN 0x%06x, %s\n", n.IP, n.State, n.GID, n.QPN, how)
		}
	}
	for _, n := range ifc.Notes {
		fmt.Fprintf(b, "    note: %s\n", n)
	}
}

func datagramLimit(ifc Interface) string {
	if ifc.MaxMTU.Datagram == 0 {
		return fmt.Sprintf("datagram up to the IB MTU less %d (the port's MTU is not known here)", HeaderLen)
	}
	return fmt.Sprintf("datagram up to %d (IB MTU %v less %d)", ifc.MaxMTU.Datagram, ifc.IBMTU, HeaderLen)
}

func connectedLimit(ifc Interface) string {
	if !ifc.HwAddr.IsValid() {
		return "connected mode unknown (no IPoIB hardware address)"
	}
	if ifc.MaxMTU.Connected == 0 {
		return "no connected mode (the address lacks the RC flag)"
	}
	return fmt.Sprintf("connected up to %d", ifc.MaxMTU.Connected)
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
