//go:build linux

package ibv

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/rbridge/rbridge/internal/arena"
)

// ArenaOptions configure MapArena.
type ArenaOptions struct {
	// HugePages asks for explicit huge pages (MAP_HUGETLB) and falls back to
	// transparent huge pages when none are reserved.
	HugePages bool
}

// Arena is memory outside the Go heap (rbridge's one arena mapping,
// internal/arena) for MRs: the garbage collector never moves or frees it,
// so the device may use it for as long as an MR over it lives. MRs
// registered over it are closed with it.
type Arena struct {
	res resource
	a   *arena.Arena
	mem []byte
}

// MapArena maps and populates size bytes; it refuses a size the machine,
// the cgroup or the address space cannot hold, naming the limit.
func MapArena(size int, opts ArenaOptions) (*Arena, error) {
	a := &Arena{}
	err := a.res.create(kindArena, nil, func() (func() error, error) {
		m, err := arena.Map(size, arena.Options{HugePages: opts.HugePages})
		if err != nil {
			return nil, err
		}
		a.a, a.mem = m, m.Bytes()
		arenasMu.Lock()
		arenas[a] = struct{}{}
		arenasMu.Unlock()
		return a.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("ibv: %w", err)
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
	a.mem = nil
	return a.a.Close()
}

// Bytes is the arena's memory; it is invalid after Close.
func (a *Arena) Bytes() []byte { return a.mem }

// HugePages reports whether the arena got explicit huge pages.
func (a *Arena) HugePages() bool { return a.a != nil && a.a.Backing() == "hugetlb" }

// Close unmaps the arena, after closing the MRs registered over it.
func (a *Arena) Close() error {
	if a == nil {
		return nil
	}
	return a.res.close()
}
