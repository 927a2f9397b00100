//go:build linux

package arena

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapArena maps and populates size bytes of anonymous memory: with explicit
// huge pages when asked and reserved, else with transparent huge pages
// advised. Before populating ordinary pages it checks that the memory is
// there (memoryLimits): MAP_POPULATE past a cgroup's limit calls the OOM
// killer rather than failing.
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
	var as unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &as); err != nil {
		as.Cur = unix.RLIM_INFINITY
	}
	pg := uint64(unix.Getpagesize())
	need := (uint64(size) + pg - 1) / pg * pg
	if l, ok := tightest(memoryLimits(os.DirFS("/"), as.Cur, pg)); ok && need > l.avail {
		return nil, "", nil, fmt.Errorf("%s: %w", l.describe(), ErrTooLarge)
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
