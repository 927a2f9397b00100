package mcast

import (
	"encoding/binary"
	"fmt"
)

// BroadcastLen is the length of an IPoIB hardware address, the form of an
// IPoIB link's broadcast address: a reserved byte and a 24-bit QPN
// (0xffffff for multicast), then the broadcast GID (RFC 4391 section 9.1.1).
const BroadcastLen = 20

// FromBroadcast returns the mapping form makes on the IPoIB link whose
// broadcast hardware address is bcast (the netdev's broadcast, as `ip link`
// shows it: 00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff on
// the default partition): its scope and P_Key, as ip_ib_mc_map and
// cma_set_mgid take them (bytes 5 and 8-9). form is IPoIB or RDMACM.
func FromBroadcast(bcast []byte, form Form) (Mapping, error) {
	if form != IPoIB && form != RDMACM {
		return Mapping{}, fmt.Errorf("mcast: mapping of an IPoIB broadcast address: %w: %v has no scope or P_Key", ErrBadMapping, form)
	}
	if len(bcast) != BroadcastLen {
		return Mapping{}, fmt.Errorf("mcast: mapping of IPoIB broadcast address %x: %d bytes, want %d", bcast, len(bcast), BroadcastLen)
	}
	if bcast[4] != 0xff || binary.BigEndian.Uint16(bcast[6:]) != sigIPoIB4 {
		return Mapping{}, fmt.Errorf("mcast: mapping of IPoIB broadcast address %x: %w: its GID is not an IPv4 IPoIB MGID (ff1x:401b)", bcast, ErrNotMapped)
	}
	m := Mapping{Form: form, Scope: bcast[5] & 0xf, PKey: binary.BigEndian.Uint16(bcast[8:])}
	if err := m.check(); err != nil {
		return Mapping{}, fmt.Errorf("mcast: mapping of IPoIB broadcast address %x: %w", bcast, err)
	}
	return m, nil
}
