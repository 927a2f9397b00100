package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce"
)

func newDevicesCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "devices [--json]",
		Short: "List RDMA devices, ports and GIDs, the GID rbridge would use for each local IP, and the IPoIB interfaces",
		Long: `devices lists what an operator needs from ibv_devinfo -v and rdma link: every
RDMA device, its ports (state, link layer, MTU, LID, speed and width) and GID
table (type and network device of each entry), then, for each local IP
address, the GID a verbs leg with that ip would use and why: the RoCEv2 GID
that holds the address on an Ethernet port, GID index 0 of the port under
an IPoIB interface (an InfiniBand port's GIDs hold no address).

Then the IPoIB interfaces (netdevs of link type ARPHRD_INFINIBAND), each with
its RDMA device and port (a P_Key child with its parent), mode (datagram or
connected), MTU and the MTU each mode allows there, P_Key, umcast, the GID and
QPN its hardware address carries, its IP addresses, and its neighbour entries:
each neighbour's IP with its GID and QPN, and whether unicast to it goes over a
connected-mode RC connection or as datagrams.

On a machine without RDMA devices or IPoIB interfaces it says so and exits 0.
A build without cgo (CGO_ENABLED=0) cannot query RDMA devices: it lists the
IPoIB interfaces, which need no cgo, then says why and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeDevices(cmd.OutOrStdout(), jsonOut, func(devs []ibv.DeviceInfo) *ipoib.Host {
				return ipoib.NewHost(ipoib.Options{PortMTU: activeMTUs(devs)})
			})
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "one JSON object instead of text")
	return cmd
}

// devicesReport is what `rbridge devices --json` prints: ibv's report of
// the RDMA devices (its keys at the top level; absent in a build without
// RDMA support) and the IPoIB interfaces under "ipoib".
type devicesReport struct {
	*ibv.DevicesReport
	IPoIB ipoib.Report `json:"ipoib"`
}

// writeDevices writes the devices report: the RDMA devices, then the
// IPoIB interfaces of the host newHost returns for those devices. It
// writes what it could list and then returns why the rest could not be.
func writeDevices(w io.Writer, jsonOut bool, newHost func([]ibv.DeviceInfo) *ipoib.Host) error {
	var rep devicesReport
	devs, rdmaErr := ibv.QueryDevices()
	ib, ibErr := newHost(devs).Report()
	if ibErr != nil {
		ib = ipoib.Report{Interfaces: []ipoib.InterfaceReport{}, Note: "IPoIB interfaces unknown: " + ibErr.Error()}
	}
	rep.IPoIB = ib
	if rdmaErr != nil {
		rdmaErr = fmt.Errorf("list RDMA devices: %w", rdmaErr)
	} else {
		addrs, err := ibv.LocalAddrs()
		if err != nil {
			return err
		}
		r := ibv.BuildDevicesReport(devs, withIPoIBPorts(addrs, ib))
		rep.DevicesReport = &r
	}
	if err := rep.write(w, jsonOut); err != nil {
		return err
	}
	return errors.Join(rdmaErr, ibErr)
}

// withIPoIBPorts gives each address on an IPoIB interface of ib the
// interface's RDMA port (or why it is not known), which its GID choice
// takes, as a verbs leg's does (bridge/leg's FindGID).
func withIPoIBPorts(addrs []ibv.LocalAddr, ib ipoib.Report) []ibv.LocalAddr {
	ports := map[string]ibv.IPoIBPort{}
	for _, ir := range ib.Interfaces {
		ports[ir.Name] = ir.RDMAPort()
	}
	out := slices.Clone(addrs)
	for i, a := range out {
		if p, ok := ports[a.Netdev]; ok {
			out[i].IPoIB = &p
		}
	}
	return out
}

func (r devicesReport) write(w io.Writer, jsonOut bool) error {
	if jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if r.DevicesReport != nil {
		if err := r.DevicesReport.WriteText(w); err != nil {
			return err
		}
	}
	return r.IPoIB.WriteText(w)
}

// activeMTUs gives each RDMA port's active MTU, from which an IPoIB
// interface's datagram MTU limit follows.
func activeMTUs(devs []ibv.DeviceInfo) func(string, int) roce.MTU {
	m := map[string]map[int]roce.MTU{}
	for _, d := range devs {
		m[d.Name] = map[int]roce.MTU{}
		for _, p := range d.Ports {
			m[d.Name][p.Port] = p.ActiveMTU
		}
	}
	return func(dev string, port int) roce.MTU { return m[dev][port] }
}
