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
// addresses, and whose IPoIB interfaces do not hold it), never "no
// usable RoCEv2 GID" to an InfiniBand user; on RoCE ports ibv's words
// stay, and so do the errors of an address found on IPoIB. The error
// still matches ibv.ErrNoGID.
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
			"198.18.3.1 was not found on an RDMA port: no IPoIB interface holds it, and mlx5_0 port 1 is an InfiniBand port, whose GIDs are the port's GUIDs, not IP addresses; a verbs leg on an InfiniBand port is found by the address of the port's IPoIB interface (rbridge devices lists them, with their ports and addresses)"},
		{"two InfiniBand ports", map[string]string{"mlx5_0/1": "InfiniBand", "mlx5_0/2": "InfiniBand", "rxe0/1": "Ethernet"}, "", 0, noGID,
			"198.18.3.1 was not found on an RDMA port: no IPoIB interface holds it, and mlx5_0 port 1, mlx5_0 port 2 are InfiniBand ports, whose GIDs"},
		{"the leg's device is InfiniBand", map[string]string{"mlx5_0/1": "InfiniBand", "rxe0/1": "Ethernet"}, "mlx5_0", 1, noGID,
			"198.18.3.1 was not found on an RDMA port: no IPoIB interface holds it, and mlx5_0 port 1 is an InfiniBand port"},
		{"the leg's device is RoCE", map[string]string{"mlx5_0/1": "InfiniBand", "rxe0/1": "Ethernet"}, "rxe0", 0, noGID, ""},
		{"RoCE ports only", map[string]string{"rxe0/1": "Ethernet"}, "", 0, noGID, ""},
		{"not ErrNoGID", map[string]string{"mlx5_0/1": "InfiniBand"}, "", 0, ibv.ErrAmbiguousGID, ""},
		{"on IPoIB, another port named", map[string]string{"mlx5_0/1": "InfiniBand", "mlx5_1/1": "InfiniBand"}, "mlx5_1", 0,
			fmt.Errorf("choose gid for 198.18.3.1 on device mlx5_1: 198.18.3.1 is on IPoIB netdev ib0 on mlx5_0 port 1; name that device and port, or leave them out: %w", ibv.ErrWrongPort), ""},
		{"on IPoIB, port unknown", map[string]string{"mlx5_0/1": "InfiniBand"}, "", 0,
			fmt.Errorf("choose gid for 198.18.3.1: it is on IPoIB netdev ib0, whose RDMA device and port are unknown: %w", ibv.ErrNoIPoIBGID), ""},
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
