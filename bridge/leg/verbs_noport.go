package leg

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
)

// A NoPortError is a verbs leg whose port was not found by its address
// (FindGID's ibv.ErrNoGID: no RoCE GID and no IPoIB interface holds it)
// on a host where that is not a matter of RoCE GIDs: it has no RDMA
// device at all, or the ports the leg may be on are InfiniBand ones,
// whose GIDs are not IP addresses (a leg there is found by its port's
// IPoIB interface's address). ibv's own text ("no usable RoCEv2 GID")
// would send an InfiniBand user looking for a RoCE GID; this one says
// what is there. It matches ibv.ErrNoGID.
type NoPortError struct {
	IP netip.Addr
	// IB are the InfiniBand ports ("mlx5_0 port 1") the leg may be on (its
	// device and port, when it names them); none: the host has no RDMA
	// device.
	IB  []string
	Err error // FindGID's
}

func (e *NoPortError) Error() string {
	if len(e.IB) == 0 {
		return fmt.Sprintf("no RDMA device on this host (%s lists none): a verbs leg needs the device whose port holds %v", infinibandClass, e.IP)
	}
	verb := "is an InfiniBand port"
	if len(e.IB) > 1 {
		verb = "are InfiniBand ports"
	}
	return fmt.Sprintf("%v was not found on an RDMA port: no IPoIB interface holds it, and %s %s, whose GIDs are the port's GUIDs, not IP addresses; a verbs leg on an InfiniBand port is found by the address of the port's IPoIB interface (rbridge devices lists them, with their ports and addresses)",
		e.IP, strings.Join(e.IB, ", "), verb)
}

func (e *NoPortError) Unwrap() error { return e.Err }

// infinibandClass is where sysfs lists the RDMA devices.
const infinibandClass = "/sys/class/infiniband"

// ExplainNoGID returns err, FindGID's for verbs leg l, as a *NoPortError
// when it is ibv.ErrNoGID on a host (its sysfs at sysRoot, "/sys") with
// no RDMA device, or with InfiniBand ports where the leg may be; else err
// as it is (on RoCE ports ibv's words about RoCEv2 GIDs are the right
// ones).
func ExplainNoGID(l *config.Leg, sysRoot string, err error) error {
	var ne *NoPortError
	if err == nil || !errors.Is(err, ibv.ErrNoGID) || errors.As(err, &ne) {
		return err
	}
	ports, found := linkLayers(sysRoot)
	if !found {
		return &NoPortError{IP: l.IP, Err: err}
	}
	var ib []string
	for _, p := range ports {
		if (l.Device == "" || p.device == l.Device) && (l.Port == 0 || p.port == l.Port) && p.linkLayer == "InfiniBand" {
			ib = append(ib, fmt.Sprintf("%s port %d", p.device, p.port))
		}
	}
	if len(ib) == 0 {
		return err
	}
	return &NoPortError{IP: l.IP, IB: ib, Err: err}
}

// portLayer is an RDMA port and its link layer as sysfs says it
// ("InfiniBand", "Ethernet").
type portLayer struct {
	device    string
	port      int
	linkLayer string
}

// linkLayers reads every RDMA port's link layer under sysRoot
// (class/infiniband/DEV/ports/N/link_layer), sorted; found is false when
// the host lists no RDMA device.
func linkLayers(sysRoot string) ([]portLayer, bool) {
	class := filepath.Join(sysRoot, "class", "infiniband")
	devs, err := os.ReadDir(class)
	if err != nil || len(devs) == 0 {
		return nil, false
	}
	var out []portLayer
	for _, d := range devs {
		ports, _ := os.ReadDir(filepath.Join(class, d.Name(), "ports"))
		for _, p := range ports {
			n, err := strconv.Atoi(p.Name())
			if err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(class, d.Name(), "ports", p.Name(), "link_layer"))
			out = append(out, portLayer{device: d.Name(), port: n, linkLayer: strings.TrimSpace(string(b))})
		}
	}
	slices.SortFunc(out, func(a, b portLayer) int {
		if c := strings.Compare(a.device, b.device); c != 0 {
			return c
		}
		return a.port - b.port
	})
	return out, true
}
