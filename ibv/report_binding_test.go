//go:build linux && cgo && !noibverbs

package ibv_test

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// On this machine (the host has no RDMA devices; the guest has rxe and siw)
// the report renders in both forms without error.
func TestWriteDevicesReport(t *testing.T) {
	for _, js := range []bool{false, true} {
		var b bytes.Buffer
		if err := ibv.WriteDevicesReport(&b, ibv.ReportOptions{JSON: js}); err != nil {
			t.Fatalf("WriteDevicesReport(JSON %v): %v", js, err)
		}
		if b.Len() == 0 {
			t.Errorf("WriteDevicesReport(JSON %v): empty", js)
		}
		t.Logf("%s", b.String())
	}
}
