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

// Link is a leg's interface as the kernel's link table has it, in the
// network namespace the leg opened in: its netlink socket is made there
// once and stays there, as the leg's own sockets do, whatever the
// namespace's name names later (ip netns del and add again). Reading it
// needs no thread to enter the namespace: the gateway reads its legs'
// links every half second (linkdown.go), and entering the namespace each
// time (netns.Do) cost an OS thread each, which dies with the goroutine,
// and a thread that had made RDMA resources took their place in `rdma
// res` with it (the kernel shows a resource while its maker's thread
// lives). A Link is safe for concurrent use.
type Link struct {
	ns, name string
	mu       sync.RWMutex
	h        *netlink.Handle // nil once closed
	nsh      vnetns.NsHandle // the namespace (None for the gateway's own)
}

// ErrNoInterface is a Link's interface no longer in its namespace
// (deleted, or moved to another).
var ErrNoInterface = errors.New("no such interface")

// OpenLink opens interface name's link in network namespace ns ("": the
// gateway's own). The interface need not exist yet: only the namespace
// must.
func OpenLink(ns, name string) (*Link, error) {
	l := &Link{ns: ns, name: name, nsh: vnetns.None()}
	// The route family alone: a handle asks for every family it is not
	// told, and a kernel without XFRM (the guest's) refuses that one.
	var err error
	if ns == "" {
		l.h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	} else {
		if l.nsh, err = vnetns.GetFromPath(netns.Path(ns)); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", ns, err)
		}
		l.h, err = netlink.NewHandleAt(l.nsh, unix.NETLINK_ROUTE)
	}
	if err != nil {
		l.nsh.Close()
		return nil, fmt.Errorf("netlink in network namespace %q: %w", ns, err)
	}
	return l, nil
}

// Close releases the link's netlink socket and namespace; a watch made
// before goes on until its context ends.
func (l *Link) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h != nil {
		l.h.Close()
		l.h = nil
		l.nsh.Close()
	}
	return nil
}

// link reads the interface, with l.mu held for reading.
func (l *Link) link() (netlink.Link, error) {
	if l.h == nil {
		return nil, fmt.Errorf("interface %s: link closed", l.name)
	}
	nl, err := l.h.LinkByName(l.name)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf):
		return nil, fmt.Errorf("%w: %s", ErrNoInterface, InNetns(l.name, l.ns))
	case err != nil:
		return nil, fmt.Errorf("netlink link %s: %w", l.name, err)
	}
	return nl, nil
}

// OperState returns the interface's operational state (up, down,
// lowerlayerdown, unknown, ...) and its index (an interface deleted and
// made again under the same name has another); ErrNoInterface once no
// interface of its name is in the namespace.
func (l *Link) OperState() (string, int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	nl, err := l.link()
	if err != nil {
		return "", 0, err
	}
	a := nl.Attrs()
	if s := int(a.OperState); s < len(operStates) {
		return operStates[s], a.Index, nil
	}
	return fmt.Sprintf("operstate %d", a.OperState), a.Index, nil
}

// HoldsAddr reports whether the interface holds ip now: a freebind leg's
// floating address comes and goes (keepalived adds it to the gateway
// that is master, and takes it away).
func (l *Link) HoldsAddr(ip netip.Addr) (bool, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	nl, err := l.link()
	if err != nil {
		return false, err
	}
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := l.h.AddrList(nl, family)
	if err != nil {
		return false, fmt.Errorf("netlink addresses of %s: %w", l.name, err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			return true, nil
		}
	}
	return false, nil
}

// NetnsMoved says, when the namespace's name no longer names the namespace
// the link was opened in (it was deleted, or made again), what it names
// now; "" while it does (and for the gateway's own namespace). The leg
// stays where it opened, and its link is read there.
func (l *Link) NetnsMoved() string {
	if l.ns == "" {
		return ""
	}
	now, err := vnetns.GetFromPath(netns.Path(l.ns))
	if err != nil {
		return fmt.Sprintf("network namespace %s is gone (%v)", l.ns, err)
	}
	defer now.Close()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.h == nil || now.Equal(l.nsh) {
		return ""
	}
	return fmt.Sprintf("network namespace %s is now another one (%s, opened in %s)", l.ns, now.UniqueId(), l.nsh.UniqueId())
}

// HoldsAddr reports whether interface name in network namespace ns ("":
// the gateway's own) holds ip now, for a check before a leg opens.
func HoldsAddr(ns, name string, ip netip.Addr) (bool, error) {
	l, err := OpenLink(ns, name)
	if err != nil {
		return false, err
	}
	defer l.Close()
	return l.HoldsAddr(ip)
}

// Watch subscribes to the kernel's link and address changes in the link's
// namespace and calls changed, on a goroutine of its own, for each that
// concerns its interface, until ctx ends. Should the subscription end
// first (its socket's buffer overran), lost is called once with why, and
// nothing more: what changed meanwhile is not known. It fails when it
// cannot subscribe.
func (l *Link) Watch(ctx context.Context, changed func(), lost func(error)) error {
	index := 0 // the interface's index, once known: an address update names only that
	// The subscriptions' sockets are made in the link's namespace, under
	// its lock: Close does not release the namespace meanwhile.
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.h == nil {
		return fmt.Errorf("interface %s: link closed", l.name)
	}
	if nl, err := l.link(); err == nil {
		index = nl.Attrs().Index
	}
	done := make(chan struct{})
	links := make(chan netlink.LinkUpdate, 16)
	addrs := make(chan netlink.AddrUpdate, 16)
	// The library reports an error it goes on after (a message it could
	// not read) here too; the end of a subscription is its channel's close.
	ignore := func(error) {}
	lopts := netlink.LinkSubscribeOptions{ErrorCallback: ignore}
	aopts := netlink.AddrSubscribeOptions{ErrorCallback: ignore}
	if l.ns != "" {
		nsh := l.nsh
		lopts.Namespace, aopts.Namespace = &nsh, &nsh
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, lopts); err != nil {
		return fmt.Errorf("netlink link updates in network namespace %q: %w", l.ns, err)
	}
	if err := netlink.AddrSubscribeWithOptions(addrs, done, aopts); err != nil {
		close(done)
		drainLinkUpdates(links, addrs, true, false)
		return fmt.Errorf("netlink address updates in network namespace %q: %w", l.ns, err)
	}
	name := l.name
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
				if u.Attrs().Name == name || (index != 0 && u.Attrs().Index == index) {
					// By name, or by index: a rename or a deletion
					// concerns the interface as much as a change of it.
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
