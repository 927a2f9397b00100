package guest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rbridge/rbridge/internal/netns"
)

// SkipReason is the reason a test that needs the guest gives when it skips on the host.
const SkipReason = "needs the qemu guest with rxe and siw: run `make integration`"

// sysClassInfiniband is where the kernel lists RDMA devices.
var sysClassInfiniband = "/sys/class/infiniband"

// Dev describes the device pass a test runs in: the RDMA device under test
// and its peer at the other end of a veth wire.
type Dev struct {
	Name       string     // RDMA device under test, e.g. "rxe0"
	Kind       string     // "rxe" or "siw"
	Port       int        // port number on both devices (1)
	Netdev     string     // netdev under Name, e.g. "veth0"
	IP         netip.Addr // Netdev's IPv4 address
	Peer       string     // peer RDMA device, e.g. "rxe1"
	PeerNetdev string     // netdev under Peer
	PeerIP     netip.Addr // PeerNetdev's IPv4 address
	PrefixLen  int        // prefix length of IP and PeerIP
}

// Netns describes the network namespace for a userspace RoCEv2 endpoint.
type Netns struct {
	Name       string     // namespace name, e.g. "user0"
	Path       string     // its nsfs path, e.g. "/run/netns/user0"
	Netdev     string     // netdev inside the namespace
	IP         netip.Addr // Netdev's IPv4 address
	PeerDevice string     // kernel rxe device on the same L2 segment, e.g. "rxe1"
	PeerNetdev string     // PeerDevice's netdev, in the initial namespace
	PeerIP     netip.Addr // PeerNetdev's IPv4 address
	PrefixLen  int        // prefix length of IP and PeerIP
}

// IBFabric describes the guest's stand-in for an InfiniBand island: a
// pair of rxe devices on a wire of their own that nothing on the RoCE side
// (the device passes' devices, the user namespace) can reach except
// through a gateway. Gateway is the gateway's verbs-leg device, Peer the
// island's application's.
type IBFabric struct {
	GatewayDevice string     // e.g. "rxe2"
	GatewayNetdev string     // e.g. "veth4"
	GatewayIP     netip.Addr // e.g. 198.18.3.1
	PeerDevice    string     // e.g. "rxe3"
	PeerNetdev    string     // e.g. "veth5"
	PeerIP        netip.Addr // e.g. 198.18.3.2
	PrefixLen     int
}

// IB returns the guest's IB fabric. On the host it skips the test; in the
// guest it fails the test when the environment is incomplete or a device
// is missing.
func IB(t testing.TB) IBFabric {
	t.Helper()
	if !InGuest() {
		t.Skip(SkipReason)
	}
	f, err := ibFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	for _, name := range []string{f.GatewayDevice, f.PeerDevice} {
		if _, err := os.Stat(filepath.Join(sysClassInfiniband, name)); err != nil {
			t.Fatalf("guest: RDMA device %s is missing in the guest: %v", name, err)
		}
	}
	return f
}

// Rbridge returns the path of the rbridge command in the guest, built from
// this tree (cmd/rbridge) for tests that run the gateway as users do. On the
// host it skips the test; in the guest a missing binary fails it.
func Rbridge(t testing.TB) string {
	t.Helper()
	if !InGuest() {
		t.Skip(SkipReason)
	}
	p := os.Getenv("RBRIDGE_BINARY")
	if p == "" {
		t.Fatal("guest: environment variable RBRIDGE_BINARY is not set")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("guest: the rbridge binary is missing: %v", err)
	}
	return p
}

func ibFromEnv(get func(string) string) (IBFabric, error) {
	e := env{get: get}
	f := IBFabric{
		GatewayDevice: e.str("RBRIDGE_IB_GATEWAY_DEVICE"),
		GatewayNetdev: e.str("RBRIDGE_IB_GATEWAY_NETDEV"),
		GatewayIP:     e.addr("RBRIDGE_IB_GATEWAY_IP"),
		PeerDevice:    e.str("RBRIDGE_IB_PEER_DEVICE"),
		PeerNetdev:    e.str("RBRIDGE_IB_PEER_NETDEV"),
		PeerIP:        e.addr("RBRIDGE_IB_PEER_IP"),
		PrefixLen:     e.prefixLen("RBRIDGE_PREFIX_LEN"),
	}
	return f, e.err
}

// InGuest reports whether this process runs inside the integration guest.
func InGuest() bool { return os.Getenv("RBRIDGE_GUEST") == "1" }

// Device returns the device pass this test runs in. On the host it skips the
// test; in the guest it fails the test when the environment is incomplete or
// a named device is missing from /sys/class/infiniband.
func Device(t testing.TB) Dev {
	t.Helper()
	if !InGuest() {
		t.Skip(SkipReason)
	}
	d, err := deviceFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	for _, name := range []string{d.Name, d.Peer} {
		if _, err := os.Stat(filepath.Join(sysClassInfiniband, name)); err != nil {
			t.Fatalf("guest: RDMA device %s is missing in the guest: %v", name, err)
		}
	}
	return d
}

// RequireKind returns the device pass like [Device] and skips the test,
// naming the reason, when this pass is about another kind of device ("rxe"
// or "siw").
func RequireKind(t testing.TB, kind string) Dev {
	t.Helper()
	d := Device(t)
	if d.Kind != kind {
		t.Skipf("runs on %s only, this pass is %s (%s)", kind, d.Name, d.Kind)
	}
	return d
}

// UserNetns returns the network namespace for a userspace RoCEv2 endpoint.
// On the host it skips the test; in the guest it fails the test when the
// environment is incomplete or the namespace or its peer device is missing.
func UserNetns(t testing.TB) Netns {
	t.Helper()
	if !InGuest() {
		t.Skip(SkipReason)
	}
	n, err := netnsFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("guest: %v", err)
	}
	if _, err := os.Stat(n.Path); err != nil {
		t.Fatalf("guest: network namespace %s is missing in the guest: %v", n.Name, err)
	}
	if _, err := os.Stat(filepath.Join(sysClassInfiniband, n.PeerDevice)); err != nil {
		t.Fatalf("guest: RDMA device %s is missing in the guest: %v", n.PeerDevice, err)
	}
	return n
}

// env reads the variables of the guest contract and keeps the first error.
type env struct {
	get func(string) string
	err error
}

func (e *env) str(key string) string {
	v := e.get(key)
	if v == "" && e.err == nil {
		e.err = fmt.Errorf("environment variable %s is not set", key)
	}
	return v
}

func (e *env) addr(key string) netip.Addr {
	v := e.str(key)
	if v == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(v)
	if err != nil && e.err == nil {
		e.err = fmt.Errorf("environment variable %s: %w", key, err)
	}
	return a
}

func (e *env) prefixLen(key string) int {
	v := e.str(key)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if (err != nil || n < 0 || n > 32) && e.err == nil {
		e.err = fmt.Errorf("environment variable %s=%q: not an IPv4 prefix length", key, v)
	}
	return n
}

func deviceFromEnv(get func(string) string) (Dev, error) {
	e := env{get: get}
	d := Dev{
		Name:       e.str("RBRIDGE_DEVICE"),
		Kind:       e.str("RBRIDGE_DEVICE_KIND"),
		Port:       1,
		Netdev:     e.str("RBRIDGE_NETDEV"),
		IP:         e.addr("RBRIDGE_IP"),
		Peer:       e.str("RBRIDGE_PEER_DEVICE"),
		PeerNetdev: e.str("RBRIDGE_PEER_NETDEV"),
		PeerIP:     e.addr("RBRIDGE_PEER_IP"),
		PrefixLen:  e.prefixLen("RBRIDGE_PREFIX_LEN"),
	}
	if e.err == nil && d.Kind != "rxe" && d.Kind != "siw" {
		e.err = fmt.Errorf("environment variable RBRIDGE_DEVICE_KIND=%q: want rxe or siw", d.Kind)
	}
	return d, e.err
}

func netnsFromEnv(get func(string) string) (Netns, error) {
	e := env{get: get}
	n := Netns{
		Name:       e.str("RBRIDGE_USER_NETNS"),
		Netdev:     e.str("RBRIDGE_USER_NETDEV"),
		IP:         e.addr("RBRIDGE_USER_IP"),
		PeerDevice: e.str("RBRIDGE_USER_PEER_DEVICE"),
		PeerNetdev: e.str("RBRIDGE_USER_PEER_NETDEV"),
		PeerIP:     e.addr("RBRIDGE_USER_PEER_IP"),
		PrefixLen:  e.prefixLen("RBRIDGE_PREFIX_LEN"),
	}
	n.Path = netns.Path(n.Name)
	return n, e.err
}
