package capture

import (
	"encoding/binary"
	"strconv"
)

// The Linux cooked headers, which libpcap writes for captures on the "any"
// device (tcpdump -i any) and on devices without a link-layer header.
// Version 1 (LINKTYPE_LINUX_SLL), 16 bytes:
//
//	+---------------+---------------+---------------+---------------+
//	|          Packet type          |          ARPHRD type          |
//	+---------------+---------------+---------------+---------------+
//	|    Link-layer address length  |                               |
//	+---------------+---------------+                               +
//	|                 Link-layer address (8 bytes)                  |
//	+                               +---------------+---------------+
//	|                               |         Protocol type         |
//	+---------------+---------------+---------------+---------------+
//
// Version 2 (LINKTYPE_LINUX_SLL2), 20 bytes:
//
//	+---------------+---------------+---------------+---------------+
//	|         Protocol type         |           Reserved            |
//	+---------------+---------------+---------------+---------------+
//	|                        Interface index                        |
//	+---------------+---------------+---------------+---------------+
//	|          ARPHRD type          |  Packet type  | Address length|
//	+---------------+---------------+---------------+---------------+
//	|                 Link-layer address (8 bytes)                  |
//	+                                                               +
//	|                                                               |
//	+---------------+---------------+---------------+---------------+
//
// The protocol type is the EtherType of what follows.
const (
	sllHdr    = 16
	sllProto  = 14
	sll2Hdr   = 20
	sll2Proto = 0
)

// packetTypes names the packet types (linux/if_packet.h PACKET_*).
var packetTypes = [...]string{"host", "broadcast", "multicast", "otherhost", "outgoing"}

// cookedRecord reads a cooked header, v2 when it is sll2Hdr long.
func cookedRecord(h []byte) *CookedRecord {
	var c CookedRecord
	var pt uint16
	if len(h) == sll2Hdr {
		c.IfIndex = binary.BigEndian.Uint32(h[4:])
		c.ARPHRD = binary.BigEndian.Uint16(h[8:])
		pt = uint16(h[10])
	} else {
		pt = binary.BigEndian.Uint16(h)
		c.ARPHRD = binary.BigEndian.Uint16(h[2:])
	}
	c.PacketType = "PACKET_" + strconv.Itoa(int(pt))
	if int(pt) < len(packetTypes) {
		c.PacketType = packetTypes[pt]
	}
	return &c
}
