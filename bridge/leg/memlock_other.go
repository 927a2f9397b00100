//go:build !linux

package leg

// processMemlock: the limit is Linux's; elsewhere no hint.
func processMemlock() memlockLimit { return memlockLimit{} }
