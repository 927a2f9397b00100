//go:build linux

package xdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A ring is one of the four single-producer single-consumer rings an AF_XDP
// socket shares with the kernel: fill and completion (UMEM addresses), RX
// and TX (descriptors). This side is the producer of fill and TX and the
// consumer of completion and RX; the kernel is the other end. The shared
// indices are free-running uint32s read and written with atomics; prod and
// cons cache this side's own index.
type ring struct {
	mem      []byte // the mmap'd ring
	producer *uint32
	consumer *uint32
	flags    *uint32 // XDP_RING_NEED_WAKEUP, set and cleared by the kernel
	mask     uint32
	addrs    []uint64       // fill and completion entries
	descs    []unix.XDPDesc // RX and TX entries
	local    uint32         // this side's index (producer or consumer)
}

func getsockopt(fd, level, name int, p unsafe.Pointer, size uintptr) error {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// mapRing maps the ring at page offset pgoff with n entries of entSize
// bytes, laid out as off says.
func mapRing(fd int, off *unix.XDPRingOffset, pgoff int64, n uint32, entSize uintptr, descs bool) (*ring, error) {
	size := int(off.Desc) + int(n)*int(entSize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
	}
	r := &ring{
		mem:      mem,
		producer: (*uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*uint32)(unsafe.Pointer(&mem[off.Flags])),
		mask:     n - 1,
	}
	if descs {
		r.descs = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&mem[off.Desc])), n)
	} else {
		r.addrs = unsafe.Slice((*uint64)(unsafe.Pointer(&mem[off.Desc])), n)
	}
	return r, nil
}

func (r *ring) unmap() error {
	if r == nil {
		return nil
	}
	return unix.Munmap(r.mem)
}

// Consumer side (RX, completion).

// available returns how many entries the kernel has produced.
func (r *ring) available() uint32 { return atomic.LoadUint32(r.producer) - r.local }

// release hands n consumed entries back to the kernel.
func (r *ring) release(n uint32) {
	r.local += n
	atomic.StoreUint32(r.consumer, r.local)
}

// Producer side (fill, TX).

// free returns how many entries this side may produce.
func (r *ring) free() uint32 {
	return uint32(len(r.addrs)+len(r.descs)) - (r.local - atomic.LoadUint32(r.consumer))
}

// submit publishes n produced entries to the kernel: one store of the
// producer index for the batch, none for an empty one.
func (r *ring) submit(n uint32) {
	if n == 0 {
		return
	}
	r.local += n
	atomic.StoreUint32(r.producer, r.local)
}

// needsWakeup says the kernel asks for a system call before it looks at
// the ring again (XDP_RING_NEED_WAKEUP, Linux 5.4), as libxdp's
// xsk_ring_prod__needs_wakeup reads it. The kernel sets the TX ring's flag
// when the ring is made and only a zero-copy driver bound with
// XDP_USE_NEED_WAKEUP clears it, so in copy mode, or bound without the
// flag, TX always needs its sendto; the fill ring's flag is only ever set
// by such a driver, when it ran out of fill entries or went idle.
func (r *ring) needsWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// pending returns how many produced entries the kernel has not consumed.
func (r *ring) pending() uint32 { return r.local - atomic.LoadUint32(r.consumer) }
