// Package integration runs rbridge's tests against real RDMA: a qemu guest
// booted from Debian's kernel with the kernel's Soft-RoCE (rxe) and
// soft-iWARP (siw) devices.
//
// Not implemented yet: this package holds only its documentation.
package integration
