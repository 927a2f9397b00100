package bridge

// What the gateway takes when its options leave it out, for the tools that
// size a host for it (rbridge doctor's memlock check).
const (
	// DefaultPoolSize is the gateway's memory pool: registered with every
	// verbs leg's PD and as every AF_XDP leg's UMEM, so pinned once per
	// such leg.
	DefaultPoolSize = 128 << 20
)
