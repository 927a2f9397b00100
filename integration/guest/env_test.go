package guest

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func rxePass() map[string]string {
	return map[string]string{
		"RBRIDGE_DEVICE":           "rxe0",
		"RBRIDGE_DEVICE_KIND":      "rxe",
		"RBRIDGE_NETDEV":           "veth0",
		"RBRIDGE_IP":               "198.18.1.1",
		"RBRIDGE_PEER_DEVICE":      "rxe1",
		"RBRIDGE_PEER_NETDEV":      "br1",
		"RBRIDGE_PEER_IP":          "198.18.1.2",
		"RBRIDGE_PREFIX_LEN":       "24",
		"RBRIDGE_USER_NETNS":       "user0",
		"RBRIDGE_USER_NETDEV":      "vuser1",
		"RBRIDGE_USER_IP":          "198.18.1.3",
		"RBRIDGE_USER_PEER_DEVICE": "rxe1",
		"RBRIDGE_USER_PEER_NETDEV": "br1",
		"RBRIDGE_USER_PEER_IP":     "198.18.1.2",
	}
}

func TestDeviceFromEnv(t *testing.T) {
	m := rxePass()
	got, err := deviceFromEnv(func(k string) string { return m[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Dev{
		Name: "rxe0", Kind: "rxe", Port: 1, Netdev: "veth0", IP: netip.MustParseAddr("198.18.1.1"),
		Peer: "rxe1", PeerNetdev: "br1", PeerIP: netip.MustParseAddr("198.18.1.2"), PrefixLen: 24,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("deviceFromEnv (-want +got):\n%s", diff)
	}
}

func TestNetnsFromEnv(t *testing.T) {
	m := rxePass()
	got, err := netnsFromEnv(func(k string) string { return m[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Netns{
		Name: "user0", Path: "/run/netns/user0", Netdev: "vuser1", IP: netip.MustParseAddr("198.18.1.3"),
		PeerDevice: "rxe1", PeerNetdev: "br1", PeerIP: netip.MustParseAddr("198.18.1.2"), PrefixLen: 24,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("netnsFromEnv (-want +got):\n%s", diff)
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		key, value, wantErr string
	}{
		{"RBRIDGE_DEVICE", "", "RBRIDGE_DEVICE is not set"},
		{"RBRIDGE_IP", "198.18.1", "RBRIDGE_IP"},
		{"RBRIDGE_PEER_IP", "", "RBRIDGE_PEER_IP is not set"},
		{"RBRIDGE_PREFIX_LEN", "33", "not an IPv4 prefix length"},
		{"RBRIDGE_DEVICE_KIND", "mlx5", "want rxe or siw"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			m := rxePass()
			m[tc.key] = tc.value
			_, err := deviceFromEnv(func(k string) string { return m[k] })
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("deviceFromEnv with %s=%q: error %v, want one containing %q", tc.key, tc.value, err, tc.wantErr)
			}
		})
	}
}
