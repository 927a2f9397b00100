//go:build !linux

package ibv

import "fmt"

// ArenaOptions configure MapArena.
type ArenaOptions struct{ HugePages bool }

// Arena is memory outside the Go heap (Linux only).
type Arena struct{}

// MapArena fails: arenas are Linux-only.
func MapArena(size int, opts ArenaOptions) (*Arena, error) {
	return nil, fmt.Errorf("map arena: %w", ErrNotSupported)
}

func (a *Arena) Bytes() []byte   { return nil }
func (a *Arena) HugePages() bool { return false }
func (a *Arena) Close() error    { return nil }
