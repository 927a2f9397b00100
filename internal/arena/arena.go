// Package arena maps the memory rbridge hands to NICs and to AF_XDP:
// outside the Go heap, populated up front, refused with an error naming
// the limit when the machine, the cgroup or the address space cannot
// hold it. The bridge's pool and ibv's arenas are both this mapping.
package arena

import (
	"errors"
	"fmt"
	"sync"
)

// Options configures Map.
type Options struct {
	// HugePages asks for explicit huge pages (MAP_HUGETLB); without them,
	// or when none are reserved, the arena asks for transparent huge pages.
	HugePages bool
}

// ErrTooLarge matches a Map refused because the memory is not
// there: the arena is populated when it is mapped, so asking for more than
// the machine, the cgroup or the address-space limit leaves would end in
// the OOM killer or a fault, not in an error.
var ErrTooLarge = errors.New("arena larger than the memory available")

// Arena is memory outside the Go heap, mapped and populated up front: the
// garbage collector never moves or scans it, so it may be registered with a
// NIC, used as an AF_XDP UMEM, or hold messages of any size without
// growing the heap. The bridge's pool carves one; ibv's Arena is one
// with the MRs over it as children; rbridge bench takes its message memory
// from one.
type Arena struct {
	mem     []byte
	backing string
	unmap   func() error

	once     sync.Once
	closeErr error
}

// Map maps and populates size bytes. It refuses, with an error
// matching ErrTooLarge that names the limit, a size above what the
// process may still populate (Linux: MemAvailable, the cgroup's memory
// limit, RLIMIT_AS).
func Map(size int, opts Options) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("map arena of %d bytes: want a positive size", size)
	}
	mem, backing, unmap, err := mapArena(size, opts.HugePages)
	if err != nil {
		return nil, fmt.Errorf("map arena of %s: %w", FormatBytes(uint64(size)), err)
	}
	return &Arena{mem: mem, backing: backing, unmap: unmap}, nil
}

// Bytes returns the arena's memory; it is invalid after Close.
func (a *Arena) Bytes() []byte { return a.mem }

// Backing says how the arena is backed: "hugetlb", "thp" or "4k" (or
// "heap" where mmap is not available).
func (a *Arena) Backing() string { return a.backing }

// Close unmaps the arena; it is idempotent.
func (a *Arena) Close() error {
	a.once.Do(func() {
		a.closeErr = a.unmap()
		a.mem = nil
	})
	return a.closeErr
}

// FormatBytes writes n in the largest binary unit that keeps it at 1 or
// more: "512 B", "1.5 GiB".
func FormatBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
