package igmp

import (
	"net/netip"
	"time"
)

// AllSystems is 224.0.0.1, where general IGMP queries go; AllNodes
// ff02::1, where general MLD queries go.
var (
	AllSystems = netip.AddrFrom4([4]byte{224, 0, 0, 1})
	AllNodes   = netip.MustParseAddr("ff02::1")
)

// Dst is where q goes: the all-systems (all-nodes) group for a general
// query, the group itself for a group-specific one (RFC 3376 section
// 4.1.12, RFC 3810 section 5.1.15).
func (q Query) Dst() netip.Addr {
	switch {
	case q.Group.IsValid() && !q.Group.IsUnspecified():
		return q.Group
	case q.Group.Is6():
		return AllNodes
	}
	return AllSystems
}

// AppendQuery appends q as the packet the table sends to b: an IGMPv3
// query in IPv4 (an MLDv2 query in IPv6) from Options.Addr with the
// table's robustness and query interval, which IGMPv1/v2 (MLDv1) hosts
// take as their own version's query.
func (t *Table) AppendQuery(b []byte, q Query) []byte {
	var msg [QueryV3Len]byte
	qqic := EncodeCode(t.o.QueryInterval / time.Second * 100 * time.Millisecond) // QQIC: seconds, in the code's form
	fields := QueryFields{Group: q.Group, MaxResp: q.MaxResp, QRV: uint8(min(t.o.Robustness, 7)), QQIC: qqic}
	if t.o.Addr.Is6() {
		var m6 [MLDQueryV2Len]byte
		return AppendPacket6(b, t.o.Addr, q.Dst(), AppendMLDQuery(m6[:0], fields))
	}
	return AppendPacket(b, t.o.Addr, q.Dst(), AppendQuery(msg[:0], fields))
}
