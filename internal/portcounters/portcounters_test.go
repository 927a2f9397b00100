package portcounters_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/internal/portcounters"
)

// tree copies one of doctor's fixture trees (Linux 6.1's sysfs layout;
// mlx5 names as on a ConnectX-6 Dx, rxe's as captured in the guest) and
// gives every counter file of dev's port 1 a value of its own, so a value
// read from the wrong file shows: the file's place in values, from 1.
func tree(t *testing.T, fixture, dev string, values map[string]uint64) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "sys")
	if err := os.CopyFS(root, os.DirFS(filepath.Join("../../doctor/testdata", fixture, "sys"))); err != nil {
		t.Fatal(err)
	}
	port := filepath.Join(root, "class/infiniband", dev, "ports/1")
	for f, v := range values {
		if err := os.WriteFile(filepath.Join(port, f), []byte(fmt.Sprintf("%d\n", v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestRead(t *testing.T) {
	for _, tc := range []struct {
		name, fixture, dev string
		values             map[string]uint64 // file under the port -> value written
		extra              map[string]string // more files written as is
		want               portcounters.Port
	}{
		{
			name: "mlx5", fixture: "good", dev: "mlx5_0",
			values: map[string]uint64{
				"counters/link_downed": 1, "counters/port_rcv_data": 2, "counters/port_rcv_errors": 3, "counters/port_xmit_data": 4,
				"counters/port_xmit_discards": 5, "counters/symbol_error": 6,
				"hw_counters/duplicate_request": 7, "hw_counters/implied_nak_seq_err": 8, "hw_counters/local_ack_timeout_err": 9,
				"hw_counters/np_cnp_sent": 10, "hw_counters/np_ecn_marked_roce_packets": 11, "hw_counters/out_of_sequence": 12,
				"hw_counters/packet_seq_err": 13, "hw_counters/rnr_nak_retry_err": 14, "hw_counters/rp_cnp_handled": 15,
			},
			// A newer driver's counter procfs does not know is read too.
			extra: map[string]string{"hw_counters/roce_adp_retrans_extra": "16\n"},
			want: portcounters.Port{Device: "mlx5_0", Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Rate: 100e9 / 8,
				Counters: []portcounters.Counter{
					{Dir: "counters", Name: "link_downed", Value: 1},
					// The data counters are in 4-byte words: procfs makes them bytes.
					{Dir: "counters", Name: "port_rcv_data", Value: 8, Bytes: true},
					{Dir: "counters", Name: "port_rcv_errors", Value: 3},
					{Dir: "counters", Name: "port_xmit_data", Value: 16, Bytes: true},
					{Dir: "counters", Name: "port_xmit_discards", Value: 5},
					{Dir: "counters", Name: "symbol_error", Value: 6},
					{Dir: "hw_counters", Name: "duplicate_request", Value: 7},
					{Dir: "hw_counters", Name: "implied_nak_seq_err", Value: 8},
					{Dir: "hw_counters", Name: "local_ack_timeout_err", Value: 9},
					{Dir: "hw_counters", Name: "np_cnp_sent", Value: 10},
					{Dir: "hw_counters", Name: "np_ecn_marked_roce_packets", Value: 11},
					{Dir: "hw_counters", Name: "out_of_sequence", Value: 12},
					{Dir: "hw_counters", Name: "packet_seq_err", Value: 13},
					{Dir: "hw_counters", Name: "rnr_nak_retry_err", Value: 14},
					{Dir: "hw_counters", Name: "roce_adp_retrans_extra", Value: 16},
					{Dir: "hw_counters", Name: "rp_cnp_handled", Value: 15},
				}},
		},
		{
			// rxe's names are its own: procfs knows one (duplicate_request),
			// the rest are read file by file; lifespan is not a counter,
			// and a file that holds no number is left out.
			name: "rxe", fixture: "rxe-good", dev: "rxe2",
			values: map[string]uint64{
				"hw_counters/ack_deferred": 1, "hw_counters/completer_retry_err": 2, "hw_counters/duplicate_request": 3,
				"hw_counters/lifespan": 4, "hw_counters/link_downed": 5, "hw_counters/out_of_seq_request": 6, "hw_counters/rcvd_pkts": 7,
				"hw_counters/rcvd_rnr_err": 8, "hw_counters/rcvd_seq_err": 9, "hw_counters/rdma_recvs": 10, "hw_counters/rdma_sends": 11,
				"hw_counters/retry_exceeded_err": 12, "hw_counters/retry_rnr_exceeded_err": 13, "hw_counters/send_err": 14,
				"hw_counters/send_rnr_err": 15, "hw_counters/sent_pkts": 16,
			},
			extra: map[string]string{"hw_counters/zz_not_a_number": "N/A\n"},
			want: portcounters.Port{Device: "rxe2", Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Rate: 10e9 / 8,
				Counters: []portcounters.Counter{
					{Dir: "hw_counters", Name: "ack_deferred", Value: 1},
					{Dir: "hw_counters", Name: "completer_retry_err", Value: 2},
					{Dir: "hw_counters", Name: "duplicate_request", Value: 3},
					{Dir: "hw_counters", Name: "link_downed", Value: 5},
					{Dir: "hw_counters", Name: "out_of_seq_request", Value: 6},
					{Dir: "hw_counters", Name: "rcvd_pkts", Value: 7},
					{Dir: "hw_counters", Name: "rcvd_rnr_err", Value: 8},
					{Dir: "hw_counters", Name: "rcvd_seq_err", Value: 9},
					{Dir: "hw_counters", Name: "rdma_recvs", Value: 10},
					{Dir: "hw_counters", Name: "rdma_sends", Value: 11},
					{Dir: "hw_counters", Name: "retry_exceeded_err", Value: 12},
					{Dir: "hw_counters", Name: "retry_rnr_exceeded_err", Value: 13},
					{Dir: "hw_counters", Name: "send_err", Value: 14},
					{Dir: "hw_counters", Name: "send_rnr_err", Value: 15},
					{Dir: "hw_counters", Name: "sent_pkts", Value: 16},
				}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.fixture, tc.dev, tc.values)
			for f, s := range tc.extra {
				if err := os.WriteFile(filepath.Join(root, "class/infiniband", tc.dev, "ports/1", f), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := portcounters.Read(root, tc.dev, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Read(%s port 1) (-want +got):\n%s", tc.dev, d)
			}
			if v, ok := got.Get("hw_counters", "duplicate_request"); !ok || v != tc.values["hw_counters/duplicate_request"] {
				t.Errorf("Get(hw_counters, duplicate_request) = %d, %v", v, ok)
			}
			if _, ok := got.Get("counters", "rcvd_seq_err"); ok {
				t.Error("Get found a counter in the wrong directory")
			}
			if !got.Active() {
				t.Error("an ACTIVE port is not Active")
			}
		})
	}
}

// TestReadDown: a port whose state is not ACTIVE is not Active.
func TestReadDown(t *testing.T) {
	root := tree(t, "good", "mlx5_0", nil)
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_0/ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := portcounters.Read(root, "mlx5_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != "DOWN" || p.Active() {
		t.Errorf("state %q, active %v: want DOWN, not active", p.State, p.Active())
	}
}

func TestReadErrors(t *testing.T) {
	root := tree(t, "good", "mlx5_0", nil)
	for _, tc := range []struct {
		dev  string
		port int
	}{
		{"mlx5_9", 1}, // no such device
		{"mlx5_0", 2}, // no such port
		{"mlx5_0", -1},
		{"../mlx5_0", 1},
		{"", 1},
	} {
		if p, err := portcounters.Read(root, tc.dev, tc.port); err == nil {
			t.Errorf("Read(%q, %d) = %+v, want an error", tc.dev, tc.port, p)
		}
		if s, ps, err := portcounters.ReadState(root, tc.dev, tc.port); err == nil {
			t.Errorf("ReadState(%q, %d) = %q, %q, want an error", tc.dev, tc.port, s, ps)
		}
	}
	if _, err := portcounters.Read(filepath.Join(t.TempDir(), "none"), "mlx5_0", 1); err == nil {
		t.Error("Read on a missing sysfs: no error")
	}
}

// TestReadState: the state and physical state alone, as Read gives them;
// a port down; a state file without its number is an error (what is not
// a port: TestReadErrors).
func TestReadState(t *testing.T) {
	root := tree(t, "good", "mlx5_0", nil)
	p, err := portcounters.Read(root, "mlx5_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	state, phys, err := portcounters.ReadState(root, "mlx5_0", 1)
	if err != nil || state != p.State || phys != p.PhysState || state != "ACTIVE" || phys != "LinkUp" {
		t.Errorf("ReadState = %q, %q, %v; Read's %q, %q; want ACTIVE, LinkUp", state, phys, err, p.State, p.PhysState)
	}
	ports := filepath.Join(root, "class/infiniband/mlx5_0/ports/1")
	if err := os.WriteFile(filepath.Join(ports, "state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ports, "phys_state"), []byte("3: Disabled\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if state, phys, err := portcounters.ReadState(root, "mlx5_0", 1); err != nil || state != "DOWN" || phys != "Disabled" {
		t.Errorf("ReadState of a port down = %q, %q, %v", state, phys, err)
	}
	if err := os.WriteFile(filepath.Join(ports, "state"), []byte("ACTIVE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := portcounters.ReadState(root, "mlx5_0", 1); err == nil || !strings.Contains(err.Error(), `"ACTIVE"`) {
		t.Errorf("ReadState of a state without its number: %v, want an error quoting it", err)
	}
}
