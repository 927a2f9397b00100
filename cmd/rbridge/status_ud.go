package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
)

// The directions of a UD route's and a group's counters, as the arrays
// of bridge.UDStatsSnapshot hold them.
var (
	udRouteDirs = [2]string{"to_target", "to_client"}
	groupDirs   = [2]string{config.DirectionRoCEToIB, config.DirectionIBToRoCE}
)

// writeDatagramTables prints the UD routes' counters and clients and the
// multicast groups, after the status tables, when there are any.
// DGRAMS>T and DGRAMS<T: toward the target and back (a group: RoCE to IB
// and back); DROPPED: every cause summed. Then, a row per direction, the
// rate limit in force and the drops by cause (the causes that dropped
// any), and for a group the XDP classifier's count of its datagrams
// redirected to the side that receives that way, when that side is on
// AF_XDP, and the quiet spells that way's busy-polled loop napped through
// (busy_poll_idle).
func writeDatagramTables(w io.Writer, st *bridge.Status) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var ud []bridge.RouteStatus
	for _, r := range st.Routes {
		if r.UD != nil {
			ud = append(ud, r)
		}
	}
	if len(ud) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "UD ROUTE\tCLIENTS\tRESOLVED\tREFUSED\tNO QP\tDGRAMS>T\tDGRAMS<T\tDROPPED")
		for _, r := range ud {
			s := &r.UD.Stats
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Name, r.UD.Clients, s.Resolved, s.Refused, s.NoQP, s.Datagrams[0], s.Datagrams[1], dropped(s, 0)+dropped(s, 1))
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "UD ROUTE\tDIRECTION\tRATE\tDROPPED BY CAUSE")
		for _, r := range ud {
			for d, dir := range udRouteDirs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, dir, rateNote(r.UD.Rate), dropNote(&r.UD.Stats, d))
			}
		}
	}
	if len(st.UDClients) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "UD ROUTE\tCLIENT\tCLIENT QP\tCLIENT SIDE\tTARGET SIDE")
		for _, c := range st.UDClients {
			fmt.Fprintf(tw, "%s\t%s\t%#x\t%s\t%s\n", c.Route, c.Client, c.ClientQPN, c.ClientSide, c.TargetSide)
		}
	}
	if len(st.Groups) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GROUP\tADDRESS\tROCE\tIB\tDIRECTION\tDGRAMS>IB\tDGRAMS>ROCE\tDROPPED")
		for _, g := range st.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", g.Name, g.Group, g.RoCELeg, g.IBLeg, g.Direction, g.Stats.Datagrams[0], g.Stats.Datagrams[1],
				dropped(&g.Stats, 0)+dropped(&g.Stats, 1))
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GROUP\tDIRECTION\tRATE\tDROPPED BY CAUSE\tXDP REDIRECTED\tBUSY-POLL NAPS")
		for _, g := range st.Groups {
			// Each way's receiving side: the RoCE side's for roce_to_ib.
			xdp := [2]*bridge.XDPGroupStatus{g.RoCESideXDP, g.IBSideXDP}
			for d, dir := range groupDirs {
				if g.Direction != config.DirectionBoth && g.Direction != dir {
					continue
				}
				naps := "-" // not busy-polled, or never napping (busy_poll_idle)
				if g.BusyPollNaps != nil {
					naps = fmt.Sprint(g.BusyPollNaps[d])
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, dir, rateNote(g.Rate), dropNote(&g.Stats, d), xdpGroupNote(xdp[d]), naps)
			}
		}
	}
	if len(st.Joined) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "JOINED ON\tSIDE\tINTERFACE\tWITHIN\tGROUPS\tQUERIER\tJOINED\tLEFT\tEXPIRED\tNOT TAKEN")
		for _, j := range st.Joined {
			s := &j.Stats
			q := "no (another)"
			if j.Querier {
				q = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%d\t%d\t%d\t%d\n", j.Name, j.JoinedOn, j.Interface, j.Within, len(j.Groups), j.MaxGroups, q,
				s.Joined, s.Left, s.Expired, s.Outside+s.OverMax+s.Configured+s.JoinFailed)
		}
	}
	return tw.Flush()
}

// dropped is the datagrams dropped in direction d, every cause summed.
func dropped(s *bridge.UDStatsSnapshot, d int) uint64 {
	var n uint64
	for _, c := range s.Drops() {
		n += c.N[d]
	}
	return n
}

// dropNote names the causes that dropped datagrams in direction d, with
// their counts ("rate 48, loop 2"), or "none".
func dropNote(s *bridge.UDStatsSnapshot, d int) string {
	var parts []string
	for _, c := range s.Drops() {
		if c.N[d] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.Cause, c.N[d]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// rateNote is a rate limit in force, or "none".
func rateNote(r *config.Rate) string {
	if r == nil {
		return "none"
	}
	return r.String()
}

// xdpGroupNote is the classifier's count of a group's datagrams to one
// side, or "-" where that side is not on AF_XDP.
func xdpGroupNote(x *bridge.XDPGroupStatus) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%d datagrams, %d bytes, %d ECN-CE", x.Packets, x.Bytes, x.ECNCE)
}
