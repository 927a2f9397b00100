package capture

import "strconv"

// LinkType is a capture's link-layer header type: a LINKTYPE_ value of the
// tcpdump.org registry, as the pcap file header (32 bits, of which the FCS
// bits are masked off) or a pcapng interface description (16 bits) gives it.
type LinkType uint32

// Link types Decode reads.
const (
	LinkTypeEthernet  LinkType = 1
	LinkTypeRawBSD    LinkType = 12  // DLT_RAW on OpenBSD-derived systems
	LinkTypeRawAlt    LinkType = 14  // DLT_RAW on some BSDs
	LinkTypeRaw       LinkType = 101 // an IPv4 or IPv6 packet
	LinkTypeLinuxSLL  LinkType = 113 // Linux cooked capture
	LinkTypeIPv4      LinkType = 228
	LinkTypeIPv6      LinkType = 229
	LinkTypeLinuxSLL2 LinkType = 276 // Linux cooked capture v2 (tcpdump -i any)
)

// linkTypeNames names the link types above and a few that captures of
// RDMA traffic may hold but Decode does not read.
var linkTypeNames = map[LinkType]string{
	0:                 "NULL",
	LinkTypeEthernet:  "ETHERNET",
	LinkTypeRawBSD:    "RAW",
	LinkTypeRawAlt:    "RAW",
	LinkTypeRaw:       "RAW",
	105:               "IEEE802_11",
	108:               "LOOP",
	LinkTypeLinuxSLL:  "LINUX_SLL",
	127:               "IEEE802_11_RADIOTAP",
	LinkTypeIPv4:      "IPV4",
	LinkTypeIPv6:      "IPV6",
	242:               "IPOIB",
	247:               "INFINIBAND",
	LinkTypeLinuxSLL2: "LINUX_SLL2",
}

// String returns the registry's name without the LINKTYPE_ prefix, or the
// number.
func (lt LinkType) String() string {
	if n, ok := linkTypeNames[lt]; ok {
		return n
	}
	return "LINKTYPE_" + strconv.FormatUint(uint64(lt), 10)
}
