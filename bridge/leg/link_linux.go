//go:build linux

package leg

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/netns"
)

// operStates are the kernel's operational states by their IF_OPER_ value
// (include/uapi/linux/if.h, RFC 2863), named as /sys/class/net/*/operstate
// names them.
var operStates = [...]string{"unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"}

// linkHandles are netlink handles, one per network namespace a leg named,
// opened there once: a handle's socket stays in its namespace, so reading
// a link there needs no thread to enter it. The gateway reads its legs'
// links every half second (linkdown.go); entering the namespace each time
// (netns.Do) cost an OS thread each, which dies with the goroutine, and a
// thread that had made RDMA resources took their place in `rdma res`
// with it (the kernel shows a resource while its maker's thread lives).
var linkHandles sync.Map // namespace name -> *netlink.Handle

// linkHandle returns the netlink handle of namespace ns ("": the
// gateway's own).
func linkHandle(ns string) (*netlink.Handle, error) {
	if h, ok := linkHandles.Load(ns); ok {
		return h.(*netlink.Handle), nil
	}
	// The route family alone: a handle asks for every family it is not
	// told, and a kernel without XFRM (the guest's) refuses that one.
	var h *netlink.Handle
	var err error
	if ns == "" {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		var nsh vnetns.NsHandle
		if nsh, err = vnetns.GetFromPath(netns.Path(ns)); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", ns, err)
		}
		h, err = netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
		nsh.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("netlink in network namespace %q: %w", ns, err)
	}
	if prev, loaded := linkHandles.LoadOrStore(ns, h); loaded {
		h.Close()
		return prev.(*netlink.Handle), nil
	}
	return h, nil
}

// OperState returns the operational state of interface name in network
// namespace ns ("": the gateway's own), from the kernel's link table
// (netlink: sysfs shows the namespace it was mounted in, not the leg's).
func OperState(ns, name string) (string, error) {
	h, err := linkHandle(ns)
	if err != nil {
		return "", err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return "", fmt.Errorf("netlink link %s: %w", name, err)
	}
	if s := int(l.Attrs().OperState); s < len(operStates) {
		return operStates[s], nil
	}
	return fmt.Sprintf("operstate %d", l.Attrs().OperState), nil
}

// HoldsAddr reports whether interface name in network namespace ns holds
// ip now: a freebind leg's floating address comes and goes (keepalived
// adds it to the gateway that is master, and takes it away).
func HoldsAddr(ns, name string, ip netip.Addr) (bool, error) {
	h, err := linkHandle(ns)
	if err != nil {
		return false, err
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return false, fmt.Errorf("netlink link %s: %w", name, err)
	}
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := h.AddrList(l, family)
	if err != nil {
		return false, fmt.Errorf("netlink addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			return true, nil
		}
	}
	return false, nil
}

// WatchLink subscribes to the kernel's link and address changes in
// network namespace ns ("": the gateway's own) and calls changed, on a
// goroutine of its own, for each that concerns interface name, until ctx
// ends. Should the subscription end first (its socket's buffer overran,
// the namespace went away), lost is called once with why, and nothing
// more: what changed meanwhile is not known. It fails when it cannot
// subscribe.
func WatchLink(ctx context.Context, ns, name string, changed func(), lost func(error)) error {
	nsh := vnetns.None()
	if ns != "" {
		var err error
		if nsh, err = vnetns.GetFromPath(netns.Path(ns)); err != nil {
			return fmt.Errorf("network namespace %s: %w", ns, err)
		}
		defer nsh.Close() // the sockets stay in it once made
	}
	index := 0 // the interface's index, once known: an address update names only that
	if h, err := linkHandle(ns); err == nil {
		if l, err := h.LinkByName(name); err == nil {
			index = l.Attrs().Index
		}
	}
	done := make(chan struct{})
	links := make(chan netlink.LinkUpdate, 16)
	addrs := make(chan netlink.AddrUpdate, 16)
	// The library reports an error it goes on after (a message it could
	// not read) here too; the end of a subscription is its channel's close.
	ignore := func(error) {}
	lopts := netlink.LinkSubscribeOptions{ErrorCallback: ignore}
	aopts := netlink.AddrSubscribeOptions{ErrorCallback: ignore}
	if ns != "" {
		lopts.Namespace, aopts.Namespace = &nsh, &nsh
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, lopts); err != nil {
		return fmt.Errorf("netlink link updates in network namespace %q: %w", ns, err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, aopts); err != nil {
		close(done)
		drainLinkUpdates(links, addrs, true, false)
		return fmt.Errorf("netlink address updates in network namespace %q: %w", ns, err)
	}
	go func() {
		var why error
		defer func() {
			close(done) // closes the sockets: the library's readers end, and close their channels
			drainLinkUpdates(links, addrs, links != nil, addrs != nil)
			if why != nil {
				lost(why)
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-links:
				if !ok {
					links, why = nil, errors.New("netlink link updates ended")
					return
				}
				if u.Attrs().Name == name {
					index = u.Attrs().Index
					changed()
				}
			case u, ok := <-addrs:
				if !ok {
					addrs, why = nil, errors.New("netlink address updates ended")
					return
				}
				if index == 0 || u.LinkIndex == index {
					changed()
				}
			}
		}
	}()
	return nil
}

// drainLinkUpdates reads the channels still open until their readers
// close them, so that neither blocks on a send nobody takes.
func drainLinkUpdates(links chan netlink.LinkUpdate, addrs chan netlink.AddrUpdate, l, a bool) {
	for l || a {
		select {
		case _, ok := <-links:
			l = l && ok
		case _, ok := <-addrs:
			a = a && ok
		}
	}
}
