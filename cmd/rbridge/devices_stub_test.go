//go:build !linux || !cgo || noibverbs

package main

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// TestDevices: without the binding (CGO_ENABLED=0) devices cannot list
// anything: it fails with ibv's reason and prints nothing, in both forms.
func TestDevices(t *testing.T) {
	const want = "list RDMA devices: rbridge was built without RDMA support (cgo, libibverbs and librdmacm are needed; " +
		"build with CGO_ENABLED=1 on Linux, without -tags noibverbs): not supported"
	for _, args := range [][]string{{"devices"}, {"devices", "--json"}} {
		out, _, err := run(t, nil, args...)
		if !errors.Is(err, ibv.ErrNotSupported) || err.Error() != want || out != "" {
			t.Errorf("%v = %v, output %q; want the error %q and no output", args, err, out, want)
		}
	}
}
