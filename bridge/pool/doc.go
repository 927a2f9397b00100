// Package pool is rbridge's registered memory: one contiguous arena
// mapped outside the Go heap (internal/arena: hugepages, else THP), carved
// into size classes of reference-counted buffers, registered once with
// every protection domain and used as the AF_XDP UMEM, so a payload
// received by one leg can leave through the other without a copy.
//
// A buffer's offset in the arena is its address in every registration and
// in the UMEM.
//
//	arena: | class 0: 256 B x n0 | class 1: 1 KiB x n1 | ... | class k: 64 KiB x nk |
//
// Buffers are reference counted: each leg that holds a buffer (the receive
// ring, a work request in flight, a retransmission queue) holds a reference,
// and the buffer returns to its class when the last one is released. An
// empty class is backpressure, never a crash: Get reports it and GetWait
// waits for a release.
//
// A class's free buffers are spread over shards, two per P, each a stack
// with a lock of its own: a receive loop's Frames takes from a shard of
// its own and a Get from its P's, and a buffer goes back to the shard it
// came from, so loops on different CPUs do not meet on one lock. The
// reserve, and what a LendFrames keeps free, are held apart from the
// shards, and releases refill them first (the sizeClass comment in
// pool.go).
//
// Files: pool.go (the classes, Get and GetWait, Buf, Frames for AF_XDP),
// arena.go (the mapping), pool_trace.go (Options.Trace: who last took,
// referenced and released each buffer, named when Close finds one held).
package pool
