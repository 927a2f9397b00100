//go:build linux

package ibv

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ArenaOptions configure MapArena.
type ArenaOptions struct {
	// HugePages asks for explicit huge pages (MAP_HUGETLB) and falls back to
	// transparent huge pages (madvise MADV_HUGEPAGE) when none are reserved.
	HugePages bool
}

// Arena is memory outside the Go heap (an anonymous private mmap) for MRs:
// the garbage collector never moves or frees it, so the device may use it
// for as long as an MR over it lives.
type Arena struct {
	res  resource
	mem  []byte
	huge bool
}

// MapArena maps size bytes (rounded up to the page size).
func MapArena(size int, opts ArenaOptions) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("map arena: size %d", size)
	}
	a := &Arena{}
	err := a.res.create(kindArena, nil, func() (func() error, error) {
		const prot = unix.PROT_READ | unix.PROT_WRITE
		const flags = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS | unix.MAP_POPULATE
		var err error
		if opts.HugePages {
			const huge = 2 << 20
			if a.mem, err = unix.Mmap(-1, 0, (size+huge-1)/huge*huge, prot, flags|unix.MAP_HUGETLB); err == nil {
				a.huge = true
			}
		}
		if a.mem == nil {
			pg := unix.Getpagesize()
			if a.mem, err = unix.Mmap(-1, 0, (size+pg-1)/pg*pg, prot, flags); err != nil {
				return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
			}
			if opts.HugePages {
				unix.Madvise(a.mem, unix.MADV_HUGEPAGE) // best effort: THP
			}
		}
		arenasMu.Lock()
		arenas[a] = struct{}{}
		arenasMu.Unlock()
		return a.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("map arena: %w", err)
	}
	return a, nil
}

var (
	arenasMu sync.Mutex
	arenas   = map[*Arena]struct{}{}
)

// arenaOf is the live arena that holds all of mem, or nil.
func arenaOf(mem []byte) *Arena {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	arenasMu.Lock()
	defer arenasMu.Unlock()
	for a := range arenas {
		start := uintptr(unsafe.Pointer(unsafe.SliceData(a.mem)))
		if p >= start && p+uintptr(len(mem)) <= start+uintptr(len(a.mem)) {
			return a
		}
	}
	return nil
}

func (a *Arena) free() error {
	arenasMu.Lock()
	delete(arenas, a)
	arenasMu.Unlock()
	err := unix.Munmap(a.mem)
	a.mem = nil
	if err != nil {
		return fmt.Errorf("munmap arena: %w", err)
	}
	return nil
}

// Bytes is the arena's memory; it is invalid after Close.
func (a *Arena) Bytes() []byte { return a.mem }

// HugePages reports whether the arena got explicit huge pages.
func (a *Arena) HugePages() bool { return a.huge }

// Close unmaps the arena, after closing the MRs registered over it.
func (a *Arena) Close() error {
	if a == nil {
		return nil
	}
	return a.res.close()
}
