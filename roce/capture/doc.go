// Package capture reads packet captures (pcap and pcapng) and dissects the
// RoCEv2 packets in them, for the tools that show packets to people:
// `rbridge decode`, and the status, doctor and packet-capture paths that
// want the same view of a packet.
//
// A Reader yields a capture's packets one at a time, each with its time, its
// length on the wire and the link type it was captured on (pcap's 32-bit and
// pcapng's 16-bit value as the file gives it, several interfaces and
// sections, gzip); it reads no further than the packet it returns, so it
// follows a capture written to a pipe. Decode turns one packet into a
// Record: the link layer (Ethernet with VLAN tags, raw IP, Linux cooked v1
// and v2), IPv4 or IPv6 with options, extension headers and fragments, UDP,
// and for RoCEv2 the BTH and extension headers (those of RD and XRC too,
// through roce.Packet.Dissect) and whether the ICRC is right; or why the
// packet is not RoCEv2, what is malformed, where the capture's snap length
// cut it. A Record renders as one line of text (Record.Text) or as one JSON
// object (its struct tags). Dump does both for a whole capture, one record
// per packet, and counts what it saw in Stats.
//
// The transport's own receive path does not use this package: it decodes
// frames with roce.Frame, which does not allocate and refuses what it does
// not accept. Decode allocates a Record per packet and explains everything.
package capture
