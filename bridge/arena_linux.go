//go:build linux

package bridge

import (
	"errors"

	"golang.org/x/sys/unix"
)

// mapArena maps size bytes of anonymous memory: with explicit huge pages
// when asked and reserved, else with transparent huge pages advised.
func mapArena(size int, huge bool) ([]byte, string, func() error, error) {
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_POPULATE
	if huge {
		const hugeSize = 2 << 20
		n := (size + hugeSize - 1) &^ (hugeSize - 1)
		if b, err := unix.Mmap(-1, 0, n, prot, flags|unix.MAP_HUGETLB); err == nil {
			return b[:size], "hugetlb", func() error { return unix.Munmap(b) }, nil
		} else if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EINVAL) {
			return nil, "", nil, err
		}
	}
	b, err := unix.Mmap(-1, 0, size, prot, flags)
	if err != nil {
		return nil, "", nil, err
	}
	backing := "thp"
	if unix.Madvise(b, unix.MADV_HUGEPAGE) != nil {
		backing = "4k"
	}
	return b, backing, func() error { return unix.Munmap(b) }, nil
}
