//go:build !linux || !cgo || noibverbs

package main

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// TestDevices: without the binding (CGO_ENABLED=0) devices cannot list
// RDMA devices: it lists the IPoIB interfaces (none on the host), which
// need no cgo, then fails with ibv's reason, in both forms.
func TestDevices(t *testing.T) {
	const want = "list RDMA devices: rbridge was built without RDMA support (cgo, libibverbs and librdmacm are needed; " +
		"build with CGO_ENABLED=1 on Linux, without -tags noibverbs): not supported"
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"devices"}, "no IPoIB interfaces\n"},
		{[]string{"devices", "--json"}, "{\n  \"ipoib\": {\n    \"interfaces\": [],\n    \"note\": \"no IPoIB interfaces\"\n  }\n}\n"},
	} {
		out, _, err := run(t, nil, tc.args...)
		if !errors.Is(err, ibv.ErrNotSupported) || err.Error() != want || out != tc.out {
			t.Errorf("%v = %v, output %q; want the error %q and the output %q", tc.args, err, out, want, tc.out)
		}
	}
}
