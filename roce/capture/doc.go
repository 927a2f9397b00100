// Package capture reads packet captures (pcap and pcapng) and dissects the
// RoCEv2 packets in them, for the tools that show packets to people:
// `rbridge decode`, and the status, doctor and packet-capture paths that
// want the same view of a packet.
//
// A Reader yields a capture's packets one at a time, each with the link type
// it was captured on. Decode turns one packet into a Record: the addressing
// around it, its BTH and extension headers, whether its ICRC is right, or
// why it is not RoCEv2, malformed or cut by the capture's snap length. A
// Record renders as one line of text (Record.Text) or as one JSON object
// (its struct tags). Dump does all of it for a stream, one record per
// packet, and counts what it saw in Stats.
//
// The transport's own receive path does not use this package: it decodes
// frames with roce.Frame, which does not allocate. Decode allocates a
// Record per packet and explains everything it refuses.
package capture
