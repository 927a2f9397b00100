package ipoib

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/rbridge/rbridge/roce"
)

// Netlink is what the package asks rtnetlink: the links, a link's
// addresses, a link's neighbours. *netlink.Handle implements it; tests
// give links and neighbours built in memory.
type Netlink interface {
	LinkList() ([]netlink.Link, error)
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	NeighList(linkIndex, family int) ([]netlink.Neigh, error)
}

var _ Netlink = (*netlink.Handle)(nil)

// Options say where a Host looks.
type Options struct {
	// Netlink answers for links, addresses and neighbours; nil means the
	// kernel's, in the calling thread's network namespace.
	Netlink Netlink
	// Root stands for "/": sysfs is read under its sys/ (class/net,
	// class/infiniband). Nil means the machine's own root; tests give a
	// crafted tree (os.DirFS("testdata/...")).
	Root fs.FS
	// PortMTU gives the active MTU of an RDMA device's port, from which
	// the datagram MTU limit follows (package ibv knows it: PortInfo's
	// ActiveMTU). Nil, or an MTU of 0, means not known: sysfs does not
	// show a port's MTU.
	PortMTU func(device string, port int) roce.MTU
}

// Host finds the IPoIB interfaces of a machine and their neighbours. Its
// methods may be called from several goroutines at once as long as the
// Options' Netlink and Root may.
type Host struct {
	nl      Netlink
	root    fs.FS
	portMTU func(string, int) roce.MTU
}

// NewHost returns a Host that looks where opts says.
func NewHost(opts Options) *Host {
	h := &Host{nl: opts.Netlink, root: opts.Root, portMTU: opts.PortMTU}
	if h.nl == nil {
		h.nl = &netlink.Handle{}
	}
	if h.root == nil {
		h.root = os.DirFS("/")
	}
	return h
}

// dumpRetries bounds the retries of a netlink dump the kernel reports as
// interrupted (NLM_F_DUMP_INTR: the table changed while it was read).
const dumpRetries = 3

// retryDump runs a netlink dump again while the kernel says it was
// interrupted, and returns the last answer.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var (
		v   []T
		err error
	)
	for range dumpRetries {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, fmt.Errorf("%w (%d tries)", err, dumpRetries)
}
