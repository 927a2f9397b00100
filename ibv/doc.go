// Package ibv is rbridge's binding of libibverbs and librdmacm (cgo): devices,
// ports, GID tables, protection domains, memory regions over mmap'd arenas,
// completion queues wired into Go's poller, RC and UD queue pairs, address
// handles, SRQs and rdma_cm connection management. It drives real HCAs and the
// kernel's soft devices (rxe, siw).
//
// Not implemented yet: this package holds only its documentation.
package ibv
