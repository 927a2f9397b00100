//go:build !linux

package arena

// mapArena falls back to the Go heap where mmap is not available: fine for
// tests, not for registration with a NIC.
func mapArena(size int, _ bool) ([]byte, string, func() error, error) {
	return make([]byte, size), "heap", func() error { return nil }, nil
}
