// Package integration runs rbridge's tests against real RDMA: a qemu guest
// booted from Debian's kernel with the kernel's Soft-RoCE (rxe) and
// soft-iWARP (siw) devices. `make integration` runs it; README.md in this
// directory says how to add a test, run one alone and read a failure.
//
// The package's own tests check the guest itself (devices, GIDs, addresses,
// the user network namespace). Tests in any package reach the guest through
// integration/guest; integration/cmd/vmrun and integration/internal/harness
// build, boot and report.
package integration
