package bridge

// What the gateway takes when its options leave it out, for the tools that
// size a host for it (rbridge doctor's memlock check).
const (
	// DefaultPoolSize is the gateway's memory pool: registered with every
	// verbs leg's PD, so pinned once per verbs leg.
	DefaultPoolSize = 128 << 20
	// AFXDPUMEMSize is the UMEM an AF_XDP userspace leg maps and pins.
	AFXDPUMEMSize = 2048 * 4096
)
