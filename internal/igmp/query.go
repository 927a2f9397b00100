package igmp

import (
	"net/netip"
	"time"
)

// AllSystems is 224.0.0.1, where general queries go.
var AllSystems = netip.AddrFrom4([4]byte{224, 0, 0, 1})

// Dst is where q goes: the all-systems group for a general query, the
// group itself for a group-specific one (RFC 3376 section 4.1.12).
func (q Query) Dst() netip.Addr {
	if q.Group.IsValid() && !q.Group.IsUnspecified() {
		return q.Group
	}
	return AllSystems
}

// AppendQuery appends q as the IPv4 packet the table sends (an IGMPv3
// query from Options.Addr with the table's robustness and query interval,
// which v1 and v2 hosts take as their own version's query) to b.
func (t *Table) AppendQuery(b []byte, q Query) []byte {
	var msg [QueryV3Len]byte
	qqic := EncodeCode(t.o.QueryInterval / time.Second * 100 * time.Millisecond) // QQIC: seconds, in the code's form
	fields := QueryFields{Group: q.Group, MaxResp: q.MaxResp, QRV: uint8(min(t.o.Robustness, 7)), QQIC: qqic}
	return AppendPacket(b, t.o.Addr, q.Dst(), AppendQuery(msg[:0], fields))
}
