// Package igmp is the router side of IGMP (RFC 2236, RFC 3376) and of its
// IPv6 twin MLD (RFC 2710, RFC 3810) on one Ethernet link, as rbridge
// needs it to learn which multicast groups members on a link have joined:
// the messages as typed byte-slice views (Parse, ParseMLD, ParsePacket,
// and Append* for queries and, in tests, reports; MLD's messages parse
// into the Message of the IGMP type of the same meaning), the membership
// of the link's groups as a state machine driven by the messages heard and
// a clock passed in (Table, one family each), and on Linux the socket that
// hears every IGMP (MLD) message on an interface and sends the queries
// (Conn).
//
// The gateway takes the querier's part (RFC 3376 section 6.6.2): without a
// querier on a link hosts report a group only when they join it and leave
// it, so a member that goes away without a leave could never be told from
// one that stays. Table queries the link every QueryInterval (125 s) and
// drops a group no report refreshed for the group membership interval
// (260 s); a leave makes it query the group (twice, a second apart) and
// drop it 2 s later unless a member answers, so one member's leave does
// not cut the others off. When a querier with a lower address is heard
// (a multicast router, a switch's snooping querier) Table stops querying
// until that one has been silent for the other querier present interval
// (255 s), and follows its group-specific queries instead. MLD's timers
// are the same; its queries come from the interface's link-local address,
// as hosts accept no other.
//
// Membership is per group: source lists (IGMPv3 INCLUDE/EXCLUDE with
// sources) are not tracked, a group with any member is taken whole.
//
// Concurrency: Table is not safe for concurrent use (one goroutine owns
// it); Conn's Read and the Send methods may be called concurrently.
package igmp
