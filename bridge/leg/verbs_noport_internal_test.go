package leg

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
)

// sysfsPorts writes a sysfs tree with the given ports' link layers
// ("mlx5_0/1": "InfiniBand") and returns its root.
func sysfsPorts(t *testing.T, ports map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, layer := range ports {
		dev, n, _ := strings.Cut(p, "/")
		dir := filepath.Join(root, "class", "infiniband", dev, "ports", n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "link_layer"), []byte(layer+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestExplainNoGID: a verbs leg not found by its address says what the
// host has: no RDMA device, or InfiniBand ports (whose GIDs are not IP
// addresses), never "no usable RoCEv2 GID" to an InfiniBand user; on
// RoCE ports ibv's words stay. The error still matches ibv.ErrNoGID.
func TestExplainNoGID(t *testing.T) {
	ip := netip.MustParseAddr("198.18.3.1")
	noGID := fmt.Errorf("choose gid for 198.18.3.1: no GID table entry holds this address (is an RDMA device bound to the netdev that has it?): %w", ibv.ErrNoGID)
	for _, tc := range []struct {
		name   string
		ports  map[string]string // nil: no class/infiniband at all
		device string
		port   int
		err    error
		want   string // "": err unchanged
	}{
		{"no RDMA device", nil, "", 0, fmt.Errorf("no RDMA device on this host holds %v: %w", ip, ibv.ErrNoGID),
			"no RDMA device on this host (/sys/class/infiniband lists none): a verbs leg needs the device whose port holds 198.18.3.1"},
		{"an InfiniBand port", map[string]string{"mlx5_0/1": "InfiniBand"}, "", 0, noGID,
			"198.18.3.1 was not found on an RDMA port: mlx5_0 port 1 is an InfiniBand port, whose GIDs are the port's GUIDs, not IP addresses (its IPoIB interface holds the address); rbridge finds a verbs leg's port by a GID that holds its ip, as RoCE ports have, so a verbs leg on a native InfiniBand port cannot be opened yet"},
		{"two InfiniBand ports", map[string]string{"mlx5_0/1": "InfiniBand", "mlx5_0/2": "InfiniBand", "rxe0/1": "Ethernet"}, "", 0, noGID,
			"198.18.3.1 was not found on an RDMA port: mlx5_0 port 1, mlx5_0 port 2 are InfiniBand ports, whose GIDs"},
		{"the leg's device is InfiniBand", map[string]string{"mlx5_0/1": "InfiniBand", "rxe0/1": "Ethernet"}, "mlx5_0", 1, noGID,
			"198.18.3.1 was not found on an RDMA port: mlx5_0 port 1 is an InfiniBand port"},
		{"the leg's device is RoCE", map[string]string{"mlx5_0/1": "InfiniBand", "rxe0/1": "Ethernet"}, "rxe0", 0, noGID, ""},
		{"RoCE ports only", map[string]string{"rxe0/1": "Ethernet"}, "", 0, noGID, ""},
		{"not ErrNoGID", map[string]string{"mlx5_0/1": "InfiniBand"}, "", 0, ibv.ErrAmbiguousGID, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.ports != nil {
				root = sysfsPorts(t, tc.ports)
			}
			l := &config.Leg{Name: "ib", Kind: config.KindVerbs, IP: ip, Device: tc.device, Port: tc.port}
			got := ExplainNoGID(l, root, tc.err)
			if tc.want == "" {
				if got != tc.err {
					t.Errorf("got %v, want the error unchanged: %v", got, tc.err)
				}
				return
			}
			if !strings.HasPrefix(got.Error(), tc.want) {
				t.Errorf("got\n%v\nwant it to begin\n%s", got, tc.want)
			}
			if strings.Contains(got.Error(), "RoCEv2 GID") {
				t.Errorf("%v: speaks of a RoCEv2 GID to a host without RoCE ports", got)
			}
			if !errors.Is(got, tc.err) || !errors.Is(got, ibv.ErrNoGID) {
				t.Errorf("%v: does not match FindGID's error and ibv.ErrNoGID", got)
			}
			if again := ExplainNoGID(l, root, got); again != got {
				t.Errorf("explained twice: %v", again)
			}
		})
	}
}
