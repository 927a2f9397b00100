// Package nvme is the wire format of NVMe over Fabrics on RDMA, as typed
// views for a gateway that parses the capsules passing through it and
// rewrites their keyed SGL descriptors in place to point at its own
// staging memory.
//
// An NVMe-oF RDMA queue pair carries, besides the RDMA READs and WRITEs
// that move data, two kinds of SEND:
//
//	host -> target: command capsule
//	+------------------------+-----------------------------------------+
//	| SQE, 64 bytes          | in-capsule bytes: write data, or a list |
//	| (Command, Connect)     | of keyed SGL descriptors (SPDK)         |
//	+------------------------+-----------------------------------------+
//	          bytes 24-39: data pointer, one SGL descriptor
//
//	target -> host: response capsule
//	+------------------------+
//	| CQE, 16 bytes          |
//	| (Completion)           |
//	+------------------------+
//
// and the rdma_cm handshake that opens the queue carries private data
// (CMRequest, CMReply, CMReject). A keyed SGL descriptor names host memory
// as address, length and RDMA key; the target RDMA READs a write's data
// from it and RDMA WRITEs a read's data into it.
//
//	 0               8           11              15
//	+---------------+-----------+---------------+--+
//	| address (64)  |length (24)|  key (32)     |id|   id = type<<4 | subtype
//	+---------------+-----------+---------------+--+   0x40 keyed, 0x4f keyed+invalidate
//
// ParseCapsule checks a command capsule and returns its keyed descriptors
// as an SGLList of views; SetAddress, SetKey, SetLength and SetSubtype
// rewrite them in place without allocating:
//
//	c, err := nvme.ParseCapsule(capsule)
//	if err != nil { /* fail the command */ }
//	for _, d := range c.Keyed().All() {
//		d.SetAddress(staging)
//		d.SetKey(stagingRKey)
//		d.SetSubtype(nvme.SGLAddress) // unless the target may invalidate the staging key
//	}
//
// Every layout is checked against the Linux kernel's include/linux/nvme.h
// and nvme-rdma.h, its host (drivers/nvme/host/rdma.c, fabrics.c) and
// target (drivers/nvme/target/rdma.c, core.c), and SPDK's
// include/spdk/nvme_spec.h, nvmf_spec.h and lib/nvmf/rdma.c; each type
// names its source. All multi-byte fields are little-endian.
//
// Files:
//
//   - command.go: Command (the SQE), Opcode, FCType, PSDT, Direction
//   - sgl.go: SGL (one descriptor), SGLType, SGLSubtype, SGLList
//   - capsule.go: ParseCapsule, Capsule, DataKind: the data pointer's three
//     forms over RDMA and the checks before a rewrite
//   - completion.go: Completion (the CQE) and Status with its codes
//   - connect.go: Connect (the Fabrics Connect command) and ConnectData
//     (host ID, controller ID, subsystem and host NQNs)
//   - rdmacm.go: the rdma_cm private data and CMStatus
//   - errors.go: Error and the sentinels it wraps
//
// Views are byte slices with getters and setters; they never copy. Each
// has an IsValid precondition, a Fields struct and an Encode that writes
// every byte. Parsers return (view, n, err), never panic on short or
// malformed input, and do not allocate unless they fail.
package nvme
