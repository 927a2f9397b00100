//go:build !linux || !cgo || noibverbs

package ibv_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// A build without the binding compiles and says why nothing works.
func TestStubNotSupported(t *testing.T) {
	if _, err := ibv.OpenDevice("rxe0"); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("OpenDevice: %v, want ErrNotSupported", err)
	}
	if _, err := ibv.QueryDevices(); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("QueryDevices: %v, want ErrNotSupported", err)
	}
	if _, err := ibv.NewEventChannel(); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("NewEventChannel: %v, want ErrNotSupported", err)
	}
	_, err := ibv.DeviceNames()
	if err == nil || !contains(err.Error(), "without RDMA support") {
		t.Errorf("DeviceNames: %v, want a plain reason", err)
	}
}

// Without the binding the devices report cannot be made: WriteDevicesReport
// says why, with ErrNotSupported, and writes nothing (rbridge devices exits
// non-zero instead of printing a report of nothing).
func TestWriteDevicesReportWithoutBinding(t *testing.T) {
	for _, js := range []bool{false, true} {
		var b bytes.Buffer
		err := ibv.WriteDevicesReport(&b, ibv.ReportOptions{JSON: js})
		if !errors.Is(err, ibv.ErrNotSupported) || !contains(err.Error(), "list RDMA devices: rbridge was built without RDMA support") || b.Len() != 0 {
			t.Errorf("WriteDevicesReport(JSON %v) = %v, wrote %q; want ErrNotSupported and nothing written", js, err, b.String())
		}
	}
}

// Multicast joins need the binding too: they say so rather than do nothing.
func TestStubMulticast(t *testing.T) {
	var id ibv.CMID
	group := netip.MustParseAddr("239.1.2.3")
	if err := id.JoinMulticast(group, ibv.JoinOptions{SendOnly: true}); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("JoinMulticast: %v, want ErrNotSupported", err)
	}
	if err := id.LeaveMulticast(group); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("LeaveMulticast: %v, want ErrNotSupported", err)
	}
}
