// Package roce is rbridge's RoCEv2 wire format: typed views over the InfiniBand
// transport headers that RoCEv2 carries in UDP datagrams to port 4791 (BTH and
// the extension headers RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH and
// DETH, plus the CNP layout; the RDETH and XRCETH of the RD and XRC
// services, which rbridge decodes for display only), the opcode table,
// 24-bit PSN arithmetic, the invariant CRC (ICRC) with the RoCEv2 masking
// rules, the kernel's choice of UDP source port, and a gopacket layer
// registered on UDP port 4791.
//
// A RoCEv2 datagram's UDP payload is laid out as
//
//	+-----+----------------------+---------+-----+------+
//	| BTH | extension headers... | payload | pad | ICRC |
//	+-----+----------------------+---------+-----+------+
//	  12B   by opcode (0..28B)      0..MTU    0-3B   4B
//
// Header views (BTH, RETH, ...) are byte slices with getters and setters; they
// never copy. Parsers return (value, n, err) and never panic on short or
// malformed input; Decode and the encoders do not allocate.
package roce
