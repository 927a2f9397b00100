//go:build linux && cgo && !noibverbs

package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
)

// TestDevices: with the binding, devices prints the report of what ibv
// finds, then the IPoIB interfaces, and exits 0. On the host, which has no
// RDMA devices and no IPoIB interfaces, that is two lines and a JSON
// object saying so.
func TestDevices(t *testing.T) {
	devs, err := ibv.QueryDevices()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ibv.LocalAddrs()
	if err != nil {
		t.Fatal(err)
	}
	ib, err := ipoib.NewHost(ipoib.Options{PortMTU: activeMTUs(devs)}).Report()
	if err != nil {
		t.Fatal(err)
	}
	wantText := "no RDMA devices found\nno IPoIB interfaces\n"
	wantJSON := `{"devices":[],"gid_choices":[],"note":"no RDMA devices found","ipoib":{"interfaces":[],"note":"no IPoIB interfaces"}}`
	if len(devs) > 0 || len(ib.Interfaces) > 0 {
		t.Logf("this machine has RDMA devices: %d, IPoIB interfaces: %d", len(devs), len(ib.Interfaces))
		rep := ibv.BuildDevicesReport(devs, withIPoIBPorts(addrs, ib))
		var b bytes.Buffer
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if err := ib.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		j, err := json.Marshal(devicesReport{DevicesReport: &rep, IPoIB: ib})
		if err != nil {
			t.Fatal(err)
		}
		wantText, wantJSON = b.String(), string(j)
	}
	out, _, err := run(t, nil, "devices")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantText, out); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	out, _, err = run(t, nil, "devices", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(out)); err != nil {
		t.Fatalf("devices --json: %v in %q", err, out)
	}
	if diff := cmp.Diff(wantJSON, compact.String()); diff != "" {
		t.Errorf("devices --json (-want +got):\n%s", diff)
	}
}
