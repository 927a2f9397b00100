package bridge

// What the gateway takes when its options leave it out, for the tools that
// size a host for it (rbridge doctor's memlock check).
const (
	// DefaultPoolSize is the gateway's memory pool: registered with every
	// verbs leg's PD and as every AF_XDP leg's UMEM, so pinned once per
	// such leg.
	DefaultPoolSize = 128 << 20
)

// The pool's size classes. A gateway whose routes carry a protocol (they
// stage: design.md, "Protocol-aware staging") has two more, for the data
// of one request each: up to 1 MiB, the largest transfer of the Linux
// NVMe-oF host and target (NVME_RDMA_MAX_SEGMENTS pages; nvmet-rdma's
// MDTS), and one of 16 KiB for a verbs leg's receives (receive_size:
// 16384 holds a capsule with its in-capsule data). Each class gets an
// equal share of the pool: 21 buffers of 1 MiB, 85 of 256 KiB and 1365
// of 16 KiB in the default pool.
//
// A gateway that stages keeps StagingPoolReserve of each class for its
// staging (pool.Options.Reserve): a message waiting behind a staged one
// holds its buffer, and messages could otherwise take every buffer the
// staging waits for.
var (
	DefaultPoolClasses = []int{256, 4 << 10, 64 << 10}
	StagingPoolClasses = []int{256, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}
	StagingPoolReserve = 0.125
)
