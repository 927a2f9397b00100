package ibv

import (
	"fmt"
)

// DeviceInfo is what rbridge reports about one RDMA device: the useful part
// of ibv_query_device and of every port's ibv_query_port and GID table.
type DeviceInfo struct {
	Name            string     `json:"name"`
	Transport       Transport  `json:"transport"`
	NodeGUID        string     `json:"node_guid"`
	SysImageGUID    string     `json:"sys_image_guid"`
	FirmwareVersion string     `json:"fw_ver,omitempty"`
	VendorID        uint32     `json:"vendor_id"`
	VendorPartID    uint32     `json:"vendor_part_id"`
	HWVersion       uint32     `json:"hw_ver"`
	Attr            DeviceAttr `json:"attr"`
	Ports           []PortInfo `json:"ports"`
}

// DeviceAttr holds a device's limits (struct ibv_device_attr).
type DeviceAttr struct {
	MaxMRSize       uint64 `json:"max_mr_size"`
	MaxQP           int    `json:"max_qp"`
	MaxQPWR         int    `json:"max_qp_wr"`
	MaxSGE          int    `json:"max_sge"`
	MaxCQ           int    `json:"max_cq"`
	MaxCQE          int    `json:"max_cqe"`
	MaxMR           int    `json:"max_mr"`
	MaxPD           int    `json:"max_pd"`
	MaxQPRdAtom     int    `json:"max_qp_rd_atom"`
	MaxQPInitRdAtom int    `json:"max_qp_init_rd_atom"`
	MaxSRQ          int    `json:"max_srq"`
	MaxSRQWR        int    `json:"max_srq_wr"`
	MaxAH           int    `json:"max_ah"`
	AtomicCap       string `json:"atomic_cap"` // "none", "HCA", "global"
	PhysPortCnt     int    `json:"phys_port_cnt"`
	LocalCAAckDelay int    `json:"local_ca_ack_delay"`
	// CapFlags are the device's capability flags (device_cap_flags).
	CapFlags DeviceCap `json:"device_cap_flags"`
	// MaxMW is how many memory windows the device has (0: none).
	MaxMW int `json:"max_mw"`
}

// MWType1 reports whether the device offers type 1 memory windows
// (IBV_DEVICE_MEM_WINDOW and max_mw > 0).
func (a DeviceAttr) MWType1() bool { return a.MaxMW > 0 && a.CapFlags&DeviceMemWindow != 0 }

// MWType2 reports whether the device offers type 2 memory windows, bound on
// a QP's send queue (IBV_DEVICE_MEM_WINDOW_TYPE_2A or _2B, and max_mw > 0).
func (a DeviceAttr) MWType2() bool {
	return a.MaxMW > 0 && a.CapFlags&(DeviceMemWindowType2A|DeviceMemWindowType2B) != 0
}

// DeviceCap is a set of device capability flags (enum
// ibv_device_cap_flags).
type DeviceCap uint64

// Device capability flags.
const (
	DeviceResizeMaxWR         DeviceCap = 1 << 0
	DeviceBadPKeyCntr         DeviceCap = 1 << 1
	DeviceBadQKeyCntr         DeviceCap = 1 << 2
	DeviceRawMulti            DeviceCap = 1 << 3
	DeviceAutoPathMig         DeviceCap = 1 << 4
	DeviceChangePhyPort       DeviceCap = 1 << 5
	DeviceUDAVPortEnforce     DeviceCap = 1 << 6
	DeviceCurrQPStateMod      DeviceCap = 1 << 7
	DeviceShutdownPort        DeviceCap = 1 << 8
	DeviceInitType            DeviceCap = 1 << 9
	DevicePortActiveEvent     DeviceCap = 1 << 10
	DeviceSysImageGUID        DeviceCap = 1 << 11
	DeviceRCRNRNAKGen         DeviceCap = 1 << 12
	DeviceSRQResize           DeviceCap = 1 << 13
	DeviceNNotifyCQ           DeviceCap = 1 << 14
	DeviceMemWindow           DeviceCap = 1 << 17
	DeviceUDIPCsum            DeviceCap = 1 << 18
	DeviceXRC                 DeviceCap = 1 << 20
	DeviceMemMgtExtensions    DeviceCap = 1 << 21
	DeviceMemWindowType2A     DeviceCap = 1 << 23
	DeviceMemWindowType2B     DeviceCap = 1 << 24
	DeviceRCIPCsum            DeviceCap = 1 << 25
	DeviceRawIPCsum           DeviceCap = 1 << 26
	DeviceManagedFlowSteering DeviceCap = 1 << 29
)

var deviceCapNames = [...]string{
	0: "RESIZE_MAX_WR", 1: "BAD_PKEY_CNTR", 2: "BAD_QKEY_CNTR", 3: "RAW_MULTI", 4: "AUTO_PATH_MIG",
	5: "CHANGE_PHY_PORT", 6: "UD_AV_PORT_ENFORCE", 7: "CURR_QP_STATE_MOD", 8: "SHUTDOWN_PORT",
	9: "INIT_TYPE", 10: "PORT_ACTIVE_EVENT", 11: "SYS_IMAGE_GUID", 12: "RC_RNR_NAK_GEN",
	13: "SRQ_RESIZE", 14: "N_NOTIFY_CQ", 17: "MEM_WINDOW", 18: "UD_IP_CSUM", 20: "XRC",
	21: "MEM_MGT_EXTENSIONS", 23: "MEM_WINDOW_TYPE_2A", 24: "MEM_WINDOW_TYPE_2B", 25: "RC_IP_CSUM",
	26: "RAW_IP_CSUM", 29: "MANAGED_FLOW_STEERING",
}

func (c DeviceCap) String() string { return flagNames(deviceCapNames[:], uint64(c)) }

// PortInfo is one port: ibv_query_port plus the valid GID table entries.
type PortInfo struct {
	Port        int        `json:"port"`
	State       PortState  `json:"state"`
	PhysState   PhysState  `json:"phys_state"`
	LinkLayer   LinkLayer  `json:"link_layer"`
	MaxMTU      MTU        `json:"max_mtu"`
	ActiveMTU   MTU        `json:"active_mtu"`
	LID         uint16     `json:"lid"`
	SMLID       uint16     `json:"sm_lid"`
	LMC         uint8      `json:"lmc"`
	Speed       Speed      `json:"active_speed"`
	Width       Width      `json:"active_width"`
	GIDTableLen int        `json:"gid_tbl_len"`
	GIDs        []GIDEntry `json:"gids"`
}

// Rate is the port's data rate in Gb/s (speed times lanes), 0 if unknown.
func (p PortInfo) Rate() float64 { return p.Speed.Gbps() * float64(p.Width.Lanes()) }

// PhysState is a port's physical state (ibv_port_attr.phys_state).
type PhysState uint8

var physStateNames = [...]string{"", "SLEEP", "POLLING", "DISABLED", "PORT_CONFIGURATION_TRAINING", "LINK_UP", "LINK_ERROR_RECOVERY", "PHY_TEST"}

func (s PhysState) String() string { return enumName(physStateNames[:], int(s), "PhysState") }

// Width is a port's active link width (ibv_port_attr.active_width).
type Width uint8

// Lanes is the number of lanes, 0 if unknown.
func (w Width) Lanes() int {
	switch w {
	case 1:
		return 1
	case 2:
		return 4
	case 4:
		return 8
	case 8:
		return 12
	case 16:
		return 2
	}
	return 0
}

func (w Width) String() string {
	if n := w.Lanes(); n != 0 {
		return fmt.Sprintf("%dX", n)
	}
	return fmt.Sprintf("Width(%d)", uint8(w))
}

// Speed is a port's active per-lane speed (ibv_port_attr.active_speed).
type Speed uint8

var speedTable = map[Speed]struct {
	name string
	gbps float64
}{
	1: {"SDR", 2.5}, 2: {"DDR", 5}, 4: {"QDR", 10}, 8: {"FDR10", 10.3125},
	16: {"FDR", 14.0625}, 32: {"EDR", 25.78125}, 64: {"HDR", 53.125}, 128: {"NDR", 106.25},
}

// Gbps is the per-lane signalling rate, 0 if unknown.
func (s Speed) Gbps() float64 { return speedTable[s].gbps }

func (s Speed) String() string {
	if t, ok := speedTable[s]; ok {
		return fmt.Sprintf("%s (%g Gbps)", t.name, t.gbps)
	}
	return fmt.Sprintf("Speed(%d)", uint8(s))
}

// Text forms in JSON, so `rbridge devices --json` reads like ibv_devinfo.

// MarshalText implements encoding.TextMarshaler.
func (s PortState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (s PhysState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (l LinkLayer) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (t Transport) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (w Width) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (c DeviceCap) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// MarshalText implements encoding.TextMarshaler.
func (s Speed) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
