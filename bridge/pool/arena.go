package pool

import (
	"fmt"

	"github.com/rbridge/rbridge/internal/arena"
)

// Arena is memory outside the Go heap, mapped and populated up front (see
// internal/arena): the pool carves one.
type Arena = arena.Arena

// ArenaOptions configures MapArena.
type ArenaOptions = arena.Options

// ErrArenaTooLarge matches a MapArena refused because the memory is not
// there (MemAvailable, the cgroup's limit, RLIMIT_AS: the error names it).
var ErrArenaTooLarge = arena.ErrTooLarge

// MapArena maps and populates size bytes.
func MapArena(size int, opts ArenaOptions) (*Arena, error) {
	a, err := arena.Map(size, opts)
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	return a, nil
}
