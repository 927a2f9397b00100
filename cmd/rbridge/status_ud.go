package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/rbridge/rbridge/bridge"
)

// writeDatagramTables prints the UD routes' counters and clients and the
// multicast groups, after the status tables, when there are any.
// DGRAMS>T and DGRAMS<T: toward the target and back (a group: RoCE to IB
// and back); DROPPED: every cause summed (the JSON has each).
func writeDatagramTables(w io.Writer, st *bridge.Status) error {
	dropped := func(s *bridge.UDStatsSnapshot) uint64 {
		var n uint64
		for d := range 2 {
			n += s.DropTooLong[d] + s.DropUnknownPeer[d] + s.DropPoolEmpty[d] + s.DropNoReceive[d] + s.DropSendFailed[d] + s.DropOwn[d] + s.DropLoop[d] + s.DropPeer[d]
		}
		return n
	}
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
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Name, r.UD.Clients, s.Resolved, s.Refused, s.NoQP, s.Datagrams[0], s.Datagrams[1], dropped(s))
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", g.Name, g.Group, g.RoCELeg, g.IBLeg, g.Direction, g.Stats.Datagrams[0], g.Stats.Datagrams[1], dropped(&g.Stats))
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
