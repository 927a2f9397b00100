package ipoib

import (
	"fmt"
	"strings"

	"github.com/rbridge/rbridge/roce"
)

// Mode is an IPoIB interface's transport mode (/sys/class/net/IF/mode).
type Mode uint8

// Modes.
const (
	ModeUnknown Mode = iota
	// ModeDatagram sends IP over the interface's UD QP: one IB packet per
	// IP packet, so the IP MTU is the IB MTU less the 4-byte IPoIB header.
	ModeDatagram
	// ModeConnected opens an RC connection per neighbour for unicast, so
	// the HCA segments and the IP MTU can reach 65520. Multicast still goes
	// over the UD QP at the datagram MTU, and a neighbour whose address
	// lacks FlagRC is reached in datagram mode.
	ModeConnected
)

func (m Mode) String() string {
	switch m {
	case ModeDatagram:
		return "datagram"
	case ModeConnected:
		return "connected"
	}
	return "unknown"
}

// MarshalText formats m as String does.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// ParseMode parses the content of the sysfs mode file ("datagram\n",
// "connected\n", as mode_show in ipoib_cm.c writes it).
func ParseMode(s string) (Mode, error) {
	switch strings.TrimSpace(s) {
	case "datagram":
		return ModeDatagram, nil
	case "connected":
		return ModeConnected, nil
	}
	return ModeUnknown, fmt.Errorf("parse ipoib mode %q: %w", s, ErrBadText)
}

// MTU figures from drivers/infiniband/ulp/ipoib/ipoib.h.
const (
	// HeaderLen is IPOIB_ENCAP_LEN: the IPoIB header (EtherType and 2
	// reserved bytes) in front of every IP packet.
	HeaderLen = 4
	// ConnectedMaxMTU is IPOIB_CM_MTU (0x10000 - 0x10): the largest IP MTU
	// of connected mode, the netdev's max_mtu whatever the mode.
	ConnectedMaxMTU = 0x10000 - 0x10
	// MinMTU is the smallest MTU ipoib_change_mtu takes in datagram mode
	// (ETH_MIN_MTU + IPOIB_ENCAP_LEN).
	MinMTU = 68 + HeaderLen

	pageSize    = 4096                                                    // PAGE_SIZE on the platforms rbridge runs on
	cmRxSG      = (ConnectedMaxMTU + HeaderLen + pageSize - 1) / pageSize // IPOIB_CM_RX_SG: 16
	cmMTUMargin = 0x10
)

// DatagramMTU is the largest IP MTU datagram mode allows on an IB link of
// MTU ib: IPOIB_UD_MTU, ib less the 4-byte header (2044 on a 2048 link,
// 4092 on 4096). It is 0 when ib is not a valid IB MTU. The kernel refuses
// more than the port's max MTU less 4 (ipoib_change_mtu) and runs at the
// broadcast group's MTU less 4 (ipoib_mcast_join_finish), which the subnet
// manager sets: normally the links' active MTU.
func DatagramMTU(ib roce.MTU) int {
	if !ib.Valid() {
		return 0
	}
	return ib.Bytes() - HeaderLen
}

// ConnectedMTU is the largest IP MTU connected mode allows on an HCA with
// maxSRQSGE scatter entries per SRQ receive (ibv_device_attr.max_srq_sge;
// 0 for an HCA without SRQs): 65520, or max_srq_sge pages less 16 bytes
// when the HCA has fewer than the 16 a 64 KiB receive needs
// (ipoib_cm_dev_init).
func ConnectedMTU(maxSRQSGE int) int {
	if maxSRQSGE <= 0 || maxSRQSGE >= cmRxSG {
		return ConnectedMaxMTU
	}
	return maxSRQSGE*pageSize - cmMTUMargin
}

// MTULimits are the largest IP MTUs an interface's modes allow. Zero means
// not known (the IB MTU, for Datagram) or not possible (Connected, on an
// interface whose address lacks FlagRC: mlx5's enhanced IPoIB, for one).
type MTULimits struct {
	Datagram  int `json:"datagram"`
	Connected int `json:"connected"`
}
