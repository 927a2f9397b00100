//go:build linux

package ipoib_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/ipoib"
)

// missing is a setup step the machine cannot do: the test skips, naming it
// (or fails with RBRIDGE_REQUIRE_ROOT=1).
type missing struct {
	what string
	err  error
}

func (m *missing) Error() string { return m.what + ": " + m.err.Error() }

// inFreshNetns runs f on an OS thread in a new network namespace of its
// own; the thread is never handed back to the scheduler, so it and the
// namespace end with f's goroutine. A *missing error from f skips the
// test, any other fails it.
func inFreshNetns(t *testing.T, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- &missing{"a network namespace of its own (unshare CLONE_NEWNET)", err}
			return
		}
		errc <- f()
	}()
	err := <-errc
	var m *missing
	if errors.As(err, &m) {
		needs(t, m.what, m.err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// infinibandTap opens a tap device and sets its link type to
// ARPHRD_INFINIBAND (TUNSETLINK, drivers/net/tun.c), the one way to give a
// netdev that type without an RDMA device and ib_ipoib. Its hardware
// address is then 0 bytes long (tun_get_addr_len knows no length for the
// type), and so is every lladdr the kernel keeps for its neighbours.
// Closing the file removes the device.
func infinibandTap(name string) (*os.File, error) {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return nil, &missing{"tun devices (/dev/net/tun)", err}
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		f.Close()
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
		f.Close()
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.TUNSETLINK, ipoib.ARPHRDInfiniband); err != nil {
		f.Close()
		return nil, fmt.Errorf("TUNSETLINK %s ARPHRD_INFINIBAND: %w", name, err)
	}
	return f, nil
}

// TestKernelInfinibandLink runs discovery and the neighbour lookup against
// the running kernel's netlink, in a network namespace of the test's own.
// No kernel here has an IPoIB interface (no RDMA on the host; rxe and siw
// in the guest are Ethernet and iWARP ports, which ib_ipoib skips), and
// the kernel refuses a link of kind ipoib without an InfiniBand parent, so
// a tap device set to ARPHRD_INFINIBAND stands in: it proves that
// discovery finds netdevs by link type through the real dump, reads their
// attributes, addresses and neighbour entries, and says what a netdev of
// that type without ipoib's driver lacks. The crafted sysfs trees
// (TestInterfaces) prove the rest.
func TestKernelInfinibandLink(t *testing.T) {
	needRoot(t)
	type result struct {
		before    []ipoib.Interface
		lookupErr error
		ipoibErr  error
		ifs       []ipoib.Interface
		index     int
		neighbors []ipoib.Neighbor
		neighErr  error
		addErr    error
		hostLinks int
	}
	var r result
	inFreshNetns(t, func() error {
		h := ipoib.NewHost(ipoib.Options{}) // the kernel's netlink, the machine's sysfs
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("lo: %w", err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return fmt.Errorf("lo up: %w", err)
		}
		if r.before, err = h.Interfaces(); err != nil {
			return err
		}
		_, r.lookupErr = h.InterfaceFor("mlx5_0", 1)

		// What `ip link add link lo name rbib1 type ipoib pkey 0x8001` asks.
		r.ipoibErr = netlink.LinkAdd(&netlink.IPoIB{
			LinkAttrs: netlink.LinkAttrs{Name: "rbib1", ParentIndex: lo.Attrs().Index}, Pkey: 0x8001})

		tap, err := infinibandTap("rbib0")
		if err != nil {
			return err
		}
		defer tap.Close()
		l, err := netlink.LinkByName("rbib0")
		if err != nil {
			return err
		}
		r.index = l.Attrs().Index
		if err := netlink.LinkSetMTU(l, 2044); err != nil {
			return fmt.Errorf("mtu: %w", err)
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 18, 200, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return fmt.Errorf("address: %w", err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("up: %w", err)
		}
		lladdr, _ := net.ParseMAC("80:00:00:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1e:5a")
		r.addErr = netlink.NeighAdd(&netlink.Neigh{LinkIndex: r.index, State: netlink.NUD_PERMANENT,
			IP: net.IPv4(198, 18, 200, 2), HardwareAddr: lladdr})
		if r.ifs, err = h.Interfaces(); err != nil {
			return err
		}
		if len(r.ifs) == 1 {
			r.neighbors, r.neighErr = h.Neighbors(r.ifs[0])
			if r.neighErr == nil {
				_, r.neighErr = h.Neighbor(r.ifs[0], netip.MustParseAddr("198.18.200.2"))
			}
		}
		all, err := netlink.LinkList()
		r.hostLinks = len(all)
		return err
	})

	if len(r.before) != 0 || !errors.Is(r.lookupErr, ipoib.ErrNoInterface) {
		t.Errorf("a fresh namespace: %d IPoIB interfaces, lookup %v; want none, ErrNoInterface", len(r.before), r.lookupErr)
	}
	if r.ipoibErr == nil {
		t.Errorf("the kernel made an ipoib link on lo")
	} else {
		t.Logf("the kernel refuses a link of kind ipoib on lo: %v (a tun device of type ARPHRD_INFINIBAND stands in)", r.ipoibErr)
	}
	if len(r.ifs) != 1 || r.hostLinks != 2 {
		t.Fatalf("after the tap: %d IPoIB interfaces among %d links, want 1 among 2 (lo, rbib0): %+v", len(r.ifs), r.hostLinks, r.ifs)
	}
	ifc := r.ifs[0]
	if ifc.Name != "rbib0" || ifc.Index != r.index || ifc.MTU != 2044 || ifc.Mode != ipoib.ModeUnknown || ifc.Device != "" {
		t.Errorf("interface = %+v; want rbib0, index %d, MTU 2044, mode unknown, no RDMA device", ifc, r.index)
	}
	if len(ifc.Addrs) != 1 || ifc.Addrs[0] != netip.MustParsePrefix("198.18.200.1/24") {
		t.Errorf("addresses = %v, want 198.18.200.1/24", ifc.Addrs)
	}
	if len(ifc.HwAddr) != 0 || len(ifc.Notes) == 0 || !strings.Contains(ifc.Notes[0], "0 bytes, not the 20") {
		t.Errorf("hardware address %v, notes %q; want 0 bytes and a note saying so", ifc.HwAddr, ifc.Notes)
	}
	if r.addErr != nil {
		t.Fatalf("ip neigh add: %v", r.addErr)
	}
	// The kernel kept addr_len (0) bytes of the 20-byte lladdr.
	if len(r.neighbors) != 1 || r.neighbors[0].IP != netip.MustParseAddr("198.18.200.2") ||
		r.neighbors[0].HwAddr != nil || r.neighbors[0].Note != "no hardware address" ||
		!strings.Contains(r.neighbors[0].State, "PERMANENT") {
		t.Errorf("neighbours = %+v; want 198.18.200.2, PERMANENT, without an address", r.neighbors)
	}
	if !errors.Is(r.neighErr, ipoib.ErrNoNeighbor) || !strings.Contains(r.neighErr.Error(), "no hardware address") {
		t.Errorf("Neighbor(198.18.200.2) = %v, want ErrNoNeighbor (no address)", r.neighErr)
	}
}
