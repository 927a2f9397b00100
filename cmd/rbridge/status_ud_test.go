package main

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
)

// TestDatagramTables: the UD routes and the groups in the text output:
// their counters, each way's rate limit in force and drops by cause (the
// rate and loop ones among them, and in the DROPPED sum), and a group's
// XDP classifier count on the side that receives each way on AF_XDP; a
// group relayed one way has a row for that way only.
func TestDatagramTables(t *testing.T) {
	st := &bridge.Status{
		Routes: []bridge.RouteStatus{
			{Name: "storage"},
			{Name: "lookup", UD: &bridge.UDRouteStatus{Clients: 1, Rate: &config.Rate{Packets: 5000, BurstPackets: 500},
				Stats: bridge.UDStatsSnapshot{Resolved: 2, Refused: 1, Datagrams: [2]uint64{10, 9}, DropTooLong: [2]uint64{1, 0},
					DropUnknownPeer: [2]uint64{0, 2}, DropRate: [2]uint64{4, 0}}}},
		},
		UDClients: []bridge.UDClientStatus{{Route: "lookup", Client: "10.20.0.9", ClientQPN: 0x40,
			ClientSide: "userspace UD QP 0x12 on roce, MTU 1024", TargetSide: "verbs UD QP 17 on ib port 1, MTU 4096 -> 10.10.0.2:7174 QP 0x11"}},
		Groups: []bridge.GroupStatus{
			{Name: "ticks", Group: "239.1.1.1", RoCELeg: "roce", IBLeg: "ib", Direction: "both",
				Rate:        &config.Rate{Packets: 10, BurstPackets: 2, Bytes: 1e6, BurstBytes: 1e5},
				Stats:       bridge.UDStatsSnapshot{Datagrams: [2]uint64{5, 7}, DropOwn: [2]uint64{5, 0}, DropLoop: [2]uint64{0, 3}, DropRate: [2]uint64{48, 0}},
				RoCESideXDP: &bridge.XDPGroupStatus{Packets: 58, Bytes: 6032, ECNCE: 1}},
			{Name: "quotes", Group: "239.1.1.2", RoCELeg: "roce", IBLeg: "ib", Direction: "ib_to_roce", BusyPollNaps: &[2]uint64{0, 4}},
			{Name: "feeds/239.2.0.1", Group: "239.2.0.1", RoCELeg: "roce", IBLeg: "ib", Direction: "roce_to_ib", FoundBy: "feeds",
				Stats: bridge.UDStatsSnapshot{Datagrams: [2]uint64{4, 0}}},
		},
		Joined: []bridge.JoinedStatus{{Name: "feeds", JoinedOn: "ib", Leg: "ib", Interface: "eth1", Within: "239.2.0.0/16", MaxGroups: 64, Querier: true,
			Groups: []string{"239.2.0.1"}, Stats: bridge.JoinedStatsSnapshot{Joined: 3, Left: 1, Expired: 1, Outside: 2, OverMax: 1}}},
	}
	var b bytes.Buffer
	if err := writeDatagramTables(&b, st); err != nil {
		t.Fatal(err)
	}
	want := `
UD ROUTE  CLIENTS  RESOLVED  REFUSED  NO QP  DGRAMS>T  DGRAMS<T  DROPPED
lookup    1        2         1        0      10        9         7

UD ROUTE  DIRECTION  RATE                          DROPPED BY CAUSE
lookup    to_target  5000 datagrams/s (burst 500)  too_long 1, rate 4
lookup    to_client  5000 datagrams/s (burst 500)  unknown_peer 2

UD ROUTE  CLIENT     CLIENT QP  CLIENT SIDE                             TARGET SIDE
lookup    10.20.0.9  0x40       userspace UD QP 0x12 on roce, MTU 1024  verbs UD QP 17 on ib port 1, MTU 4096 -> 10.10.0.2:7174 QP 0x11

GROUP            ADDRESS    ROCE  IB  DIRECTION   DGRAMS>IB  DGRAMS>ROCE  DROPPED
ticks            239.1.1.1  roce  ib  both        5          7            56
quotes           239.1.1.2  roce  ib  ib_to_roce  0          0            0
feeds/239.2.0.1  239.2.0.1  roce  ib  roce_to_ib  4          0            0

GROUP            DIRECTION   RATE                                                      DROPPED BY CAUSE  XDP REDIRECTED                      BUSY-POLL NAPS
ticks            roce_to_ib  10 datagrams/s (burst 2), 1000000 bytes/s (burst 100000)  own 5, rate 48    58 datagrams, 6032 bytes, 1 ECN-CE  -
ticks            ib_to_roce  10 datagrams/s (burst 2), 1000000 bytes/s (burst 100000)  loop 3            -                                   -
quotes           ib_to_roce  none                                                      none              -                                   4
feeds/239.2.0.1  roce_to_ib  none                                                      none              -                                   -

JOINED ON  SIDE  INTERFACE  WITHIN        GROUPS  QUERIER  JOINED  LEFT  EXPIRED  NOT TAKEN
feeds      ib    eth1       239.2.0.0/16  1/64    yes      3       1     1        3
`
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("tables (-want +got):\n%s\ngot:\n%s", d, b.String())
	}
	b.Reset()
	if err := writeDatagramTables(&b, &bridge.Status{Routes: []bridge.RouteStatus{{Name: "storage"}}}); err != nil || b.Len() != 0 {
		t.Errorf("no UD route and no group: %v, %q", err, b.String())
	}
}
