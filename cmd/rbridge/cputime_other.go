//go:build !unix

package main

import "time"

// processCPU cannot be read here.
func processCPU() (user, system time.Duration, ok bool) { return 0, 0, false }
