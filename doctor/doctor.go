package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ipoib"
)

// Severity is how bad a finding is.
type Severity int

// Severities, in order.
const (
	OK Severity = iota
	Warn
	Error
)

func (s Severity) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	case Error:
		return "error"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText implements encoding.TextMarshaler ("ok", "warn", "error").
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Finding is one thing a check saw.
type Finding struct {
	// Check names the check ("pfc", "ecn", "mtu", "gid", ...).
	Check string `json:"check"`
	// Subject is what was checked: an interface, device/port, or "host".
	Subject string `json:"subject"`
	// Leg is the config's leg the subject belongs to, if any.
	Leg      string   `json:"leg,omitempty"`
	Severity Severity `json:"severity"`
	// Message is what was seen.
	Message string `json:"finding"`
	// Fix is what to do; empty when nothing needs doing.
	Fix string `json:"fix,omitempty"`
}

// Report is every finding of a run, in the order the checks made them.
type Report struct {
	Findings []Finding `json:"findings"`
}

// Worst is the highest severity among the findings (OK for none).
func (r *Report) Worst() Severity {
	w := OK
	for _, f := range r.Findings {
		w = max(w, f.Severity)
	}
	return w
}

// Options configures Run.
type Options struct {
	// Root is the directory that stands for "/" (default "/"): sysfs is
	// read under Root/sys, procfs under Root/proc.
	Root string
	// Config names the legs to check. Without one every RDMA device and
	// network interface found is checked.
	Config *config.Config
	// System answers what files do not show; nil is the running host's
	// when Root is "/", and none (every question unanswered) for another
	// root, a captured tree, which the host's answers would not describe.
	System System
	// RoCEPriority is the 802.1p priority RoCE traffic uses and RoCEDSCP
	// the DSCP that maps to it, taken as given (DefaultRoCEPriority and
	// DefaultRoCEDSCP are the usual fabric convention).
	RoCEPriority int
	RoCEDSCP     int
	// PoolSize is the gateway's memory pool (default: Config's pool.size,
	// else bridge.DefaultPoolSize).
	PoolSize int64
	// Interval is how far apart the two counter samples are (default 1 s);
	// negative leaves the counter check out.
	Interval time.Duration
	// Sleep waits between the samples (default time.Sleep).
	Sleep func(time.Duration)
}

// The usual RoCE traffic class (NVIDIA's "lossless RoCE" setup, and most
// fabrics'): DSCP 26 on priority 3.
const (
	DefaultRoCEPriority = 3
	DefaultRoCEDSCP     = 26
)

// System is what the checks ask the host beyond its files.
type System interface {
	// InNetns runs fn in the named network namespace ("" for this one).
	InNetns(name string, fn func() error) error
	// DCB returns the interface's IEEE DCB state (dcbnl); an error
	// matching ErrNotExposed when the driver has no DCB operations.
	DCB(ifname string) (DCB, error)
	// Driver returns the interface's driver, as ethtool -i names it.
	Driver(ifname string) (string, error)
	// Addrs returns each network interface's IP addresses (in this
	// network namespace): a verbs leg on an InfiniBand port is found by
	// the IPoIB interface that holds its ip, which sysfs does not show.
	Addrs() (map[string][]netip.Addr, error)
}

// treeSystem is the System of a captured tree: no network namespaces, and
// no dcbnl or ethtool answers.
type treeSystem struct{}

var errCapturedTree = errors.New("a captured tree holds no netlink or ethtool answers")

func (treeSystem) InNetns(_ string, fn func() error) error { return fn() }
func (treeSystem) DCB(string) (DCB, error)                 { return DCB{}, errCapturedTree }
func (treeSystem) Driver(string) (string, error)           { return "", errCapturedTree }
func (treeSystem) Addrs() (map[string][]netip.Addr, error) { return nil, errCapturedTree }

// ErrNotExposed is matched by errors that mean "this driver does not
// expose that setting".
var ErrNotExposed = errors.New("not exposed by this driver")

// DCB is an interface's IEEE 802.1Qaz/Qbb state.
type DCB struct {
	// PFCCap is how many priorities can have PFC at once; PFCEnabled the
	// bitmap of priorities that have it.
	PFCCap, PFCEnabled uint8
	// DSCP maps each DSCP of the APP table's DSCP selector entries to its
	// priority; an interface with such entries trusts DSCP.
	DSCP map[uint8]uint8
}

// host is what the checks run against.
type host struct {
	o    Options
	fsys fs.FS
	sys  System
	rep  *Report
	// unseen holds the interfaces already reported missing from sysfs.
	unseen map[string]bool
	// gidTables caches the GID tables read (rxe has 1024 slots a port).
	gidTables map[string][]gidEntry
}

// A netTarget is a network interface to check, and why.
type netTarget struct {
	name  string
	leg   *config.Leg // nil: found, not configured
	netns string
	// userspace: rbridge's own transport runs on it (XDP, kernel RoCE
	// bound to it); else it carries a verbs device's RoCE traffic.
	userspace bool
	// ofDevice names the RDMA device whose GID put the interface here.
	ofDevice string
}

// An rdmaTarget is an RDMA device port to check.
type rdmaTarget struct {
	dev  string
	port int
	leg  *config.Leg
	// ipoib is the IPoIB interface that holds the leg's ip, when the leg
	// was found through it (an InfiniBand port).
	ipoib string
}

// Run runs every check and returns their findings.
func Run(o Options) (*Report, error) {
	if o.Root == "" {
		o.Root = "/"
	}
	if fi, err := os.Stat(o.Root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("doctor: root %q: not a directory (%v)", o.Root, err)
	}
	if o.RoCEPriority < 0 || o.RoCEPriority > 7 {
		return nil, fmt.Errorf("doctor: RoCE priority %d: want 0 to 7", o.RoCEPriority)
	}
	if o.RoCEDSCP < 0 || o.RoCEDSCP > 63 {
		return nil, fmt.Errorf("doctor: RoCE DSCP %d: want 0 to 63", o.RoCEDSCP)
	}
	if o.PoolSize == 0 && o.Config != nil {
		o.PoolSize = o.Config.Pool.Size
	}
	if o.PoolSize == 0 {
		o.PoolSize = bridge.DefaultPoolSize
	}
	if o.PoolSize < 0 {
		return nil, fmt.Errorf("doctor: pool size %d: want a positive size", o.PoolSize)
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	if o.System == nil {
		o.System = hostSystem{}
		if filepath.Clean(o.Root) != "/" {
			o.System = treeSystem{} // a captured tree: the host's answers are not its
		}
	}
	h := &host{o: o, fsys: os.DirFS(o.Root), sys: o.System, rep: &Report{}, unseen: map[string]bool{}, gidTables: map[string][]gidEntry{}}
	nets, rdmas := h.targets()
	h.checkGIDs(rdmas)
	h.checkMTU(nets, rdmas)
	h.checkIPoIB()
	h.checkQoS(nets)
	h.checkSysctls(nets)
	h.checkXDP(nets)
	h.checkKernelRoCE(nets)
	h.checkMemory(rdmas)
	h.checkClocksource()
	h.checkTunnels()
	if o.Interval > 0 {
		h.checkCounters(rdmas)
	}
	return h.rep, nil
}

func (h *host) add(f Finding) { h.rep.Findings = append(h.rep.Findings, f) }

func (h *host) finding(check, subject string, lg *config.Leg, sev Severity, msg, fix string) {
	f := Finding{Check: check, Subject: subject, Severity: sev, Message: msg, Fix: fix}
	if lg != nil {
		f.Leg = lg.Name
	}
	h.add(f)
}

// targets lists what to check: the config's legs, or everything found.
func (h *host) targets() ([]netTarget, []rdmaTarget) {
	var nets []netTarget
	var rdmas []rdmaTarget
	if h.o.Config == nil {
		for _, dev := range h.rdmaDevices() {
			for _, p := range h.ports(dev) {
				rdmas = append(rdmas, rdmaTarget{dev: dev, port: p})
			}
		}
		for _, n := range h.netDevices() {
			if n == "lo" || h.ifType(n) == arphrdInfiniband {
				continue // IPoIB has a check of its own; lo carries no RoCE
			}
			nets = append(nets, netTarget{name: n, userspace: false})
		}
		if len(rdmas) == 0 {
			h.finding("devices", "host", nil, Warn, "no RDMA device in /sys/class/infiniband",
				"a verbs leg needs one (an IB HCA, a RoCE NIC, or rxe: rdma link add rxe0 type rxe netdev IF); a userspace leg needs none")
		}
		return nets, rdmas
	}
	for i := range h.o.Config.Legs {
		l := &h.o.Config.Legs[i]
		switch l.Kind {
		case config.KindUserspace:
			nets = append(nets, netTarget{name: l.Interface, leg: l, netns: l.Netns, userspace: true})
		case config.KindVerbs:
			t, ndev, err := h.findVerbsLeg(l)
			if err != nil {
				h.finding("gid", "leg "+l.Name, l, Error, err.Error(),
					"the leg's ip must be on the netdev of an RDMA device (ip addr add; rdma link show lists the devices), on an InfiniBand port its IPoIB interface")
				continue
			}
			rdmas = append(rdmas, t)
			if ndev != "" {
				nets = append(nets, netTarget{name: ndev, leg: l, ofDevice: t.dev})
			}
		}
	}
	return nets, rdmas
}

// findVerbsLeg finds the device and port whose GID table holds the leg's
// IP (on the device and port named, if named), and the netdev of that GID;
// or, as rbridge run does (bridge/leg's FindGID), the port under the IPoIB
// interface that holds the IP: an InfiniBand port, whose GIDs hold no
// address. Its netdev is then "" (the Ethernet checks are not for it).
func (h *host) findVerbsLeg(l *config.Leg) (rdmaTarget, string, error) {
	devs := h.rdmaDevices()
	if l.Device != "" {
		if !contains(devs, l.Device) {
			return rdmaTarget{}, "", fmt.Errorf("RDMA device %s not found (have %s)", l.Device, orNone(devs))
		}
		devs = []string{l.Device}
	}
	for _, d := range devs {
		for _, p := range h.ports(d) {
			if l.Port != 0 && p != l.Port {
				continue
			}
			for _, g := range h.gids(d, p) {
				if g.addr.Unmap() == l.IP {
					return rdmaTarget{dev: d, port: p, leg: l}, g.ndev, nil
				}
			}
		}
	}
	if t, ndev, ok := h.iwarpWith(l, devs); ok {
		return t, ndev, nil
	}
	where := "any RDMA device"
	if l.Device != "" {
		where = l.Device
	}
	ifname, found, err := h.ipoibWith(l.IP)
	switch {
	case err != nil:
		return rdmaTarget{}, "", fmt.Errorf("no GID of %s holds %v, and the interface that holds it is unknown (%v): an InfiniBand leg is found by its port's IPoIB interface's address", where, l.IP, err)
	case !found:
		return rdmaTarget{}, "", fmt.Errorf("no GID of %s holds %v", where, l.IP)
	}
	dev, port, err := ipoib.PortOf(h.fsys, ifname)
	if err != nil {
		return rdmaTarget{}, "", fmt.Errorf("%v is on IPoIB interface %s, whose RDMA port is not known: %w", l.IP, ifname, err)
	}
	if (l.Device != "" && dev != l.Device) || (l.Port != 0 && port != l.Port) {
		return rdmaTarget{}, "", fmt.Errorf("%v is on IPoIB interface %s, on %s port %d, not on the leg's %s", l.IP, ifname, dev, port, describePort(l.Device, l.Port))
	}
	return rdmaTarget{dev: dev, port: port, leg: l, ipoib: ifname}, "", nil
}

// ipoibWith returns the IPoIB interface (ARPHRD_INFINIBAND in sysfs) that
// holds ip; found is false when none does.
func (h *host) ipoibWith(ip netip.Addr) (name string, found bool, err error) {
	addrs, err := h.sys.Addrs()
	if err != nil {
		return "", false, err
	}
	names := make([]string, 0, len(addrs))
	for n := range addrs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if h.ifType(n) != arphrdInfiniband {
			continue
		}
		for _, a := range addrs[n] {
			if a.WithZone("").Unmap() == ip.WithZone("").Unmap() {
				return n, true, nil
			}
		}
	}
	return "", false, nil
}

// iwarpWith finds, as rbridge run does (ibv.ChooseGID), the iWARP port of
// devs whose GID is the hardware address of the Ethernet interface that
// holds the leg's ip (siw, cxgb4 and irdma keep no address in their GIDs),
// and that interface. ok is false unless exactly one port is.
func (h *host) iwarpWith(l *config.Leg, devs []string) (t rdmaTarget, ndev string, ok bool) {
	addrs, err := h.sys.Addrs()
	if err != nil {
		return rdmaTarget{}, "", false
	}
	for n, as := range addrs {
		if h.ifType(n) != arphrdEther || !slices.ContainsFunc(as, func(a netip.Addr) bool { return a.WithZone("").Unmap() == l.IP.WithZone("").Unmap() }) {
			continue
		}
		s, err := h.read(netPath(n, "address"))
		if err != nil {
			continue
		}
		mac, err := net.ParseMAC(s)
		if err != nil || len(mac) != 6 {
			continue
		}
		var want [16]byte
		copy(want[:], mac)
		var hits []rdmaTarget
		for _, d := range devs {
			if !h.iwarp(d) {
				continue
			}
			for _, p := range h.ports(d) {
				if l.Port != 0 && p != l.Port {
					continue
				}
				for _, g := range h.gids(d, p) {
					if g.addr.As16() == want {
						hits = append(hits, rdmaTarget{dev: d, port: p, leg: l})
					}
				}
			}
		}
		if len(hits) == 1 {
			return hits[0], n, true
		}
	}
	return rdmaTarget{}, "", false
}

// describePort names a device and port a leg asks for ("device mlx5_0
// port 1", "port 2").
func describePort(dev string, port int) string {
	var parts []string
	if dev != "" {
		parts = append(parts, "device "+dev)
	}
	if port != 0 {
		parts = append(parts, fmt.Sprintf("port %d", port))
	}
	return strings.Join(parts, " ")
}

// rdmaDevices lists /sys/class/infiniband.
func (h *host) rdmaDevices() []string { return h.dir("sys/class/infiniband") }

// netDevices lists /sys/class/net.
func (h *host) netDevices() []string { return h.dir("sys/class/net") }

// ports lists a device's port numbers.
func (h *host) ports(dev string) []int {
	var ps []int
	for _, n := range h.dir(filepath.Join("sys/class/infiniband", dev, "ports")) {
		var p int
		if _, err := fmt.Sscan(n, &p); err == nil && p > 0 {
			ps = append(ps, p)
		}
	}
	sort.Ints(ps)
	return ps
}

func (h *host) dir(name string) []string {
	es, err := fs.ReadDir(h.fsys, name)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// read returns a file's contents, trimmed.
func (h *host) read(name string) (string, error) {
	b, err := fs.ReadFile(h.fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readInt reads a file holding one integer.
func (h *host) readInt(name string) (int64, error) {
	s, err := h.read(name)
	if err != nil {
		return 0, err
	}
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", name, s)
	}
	return v, nil
}

// netPath is a file of an interface in sysfs.
func netPath(ifname string, parts ...string) string {
	return filepath.Join(append([]string{"sys/class/net", ifname}, parts...)...)
}

// ifType is the interface's ARPHRD type, or -1.
func (h *host) ifType(ifname string) int64 {
	v, err := h.readInt(netPath(ifname, "type"))
	if err != nil {
		return -1
	}
	return v
}

// ARPHRD types.
const (
	arphrdEther      = 1
	arphrdInfiniband = 32
)

// visible reports whether the interface is in this sysfs, and if not adds
// the finding that says why its NIC checks were left out.
func (h *host) visible(t netTarget, check string) bool {
	if _, err := fs.Stat(h.fsys, netPath(t.name)); err == nil {
		return true
	}
	if h.unseen[t.name] {
		return false
	}
	h.unseen[t.name] = true
	if t.netns != "" {
		h.finding(check, t.name, t.leg, Warn,
			fmt.Sprintf("interface %s is in network namespace %s, whose sysfs this one does not show: its NIC was not checked", t.name, t.netns),
			fmt.Sprintf("run ip netns exec %s rbridge doctor --config FILE for it", t.netns))
		return false
	}
	if t.ofDevice != "" {
		// The kernel named it as the device's netdev: it is in another
		// network namespace than this sysfs.
		h.finding(check, t.name, t.leg, Warn,
			fmt.Sprintf("interface %s (%s's netdev) is not in this network namespace's sysfs: its NIC was not checked", t.name, t.ofDevice),
			"run rbridge doctor in the network namespace that holds it")
		return false
	}
	h.finding(check, t.name, t.leg, Error, fmt.Sprintf("interface %s not found in /sys/class/net", t.name),
		"check the leg's interface name (ip link show)")
	return false
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// gidEntry is one valid slot of a port's GID table in sysfs.
type gidEntry struct {
	index int
	addr  netip.Addr
	typ   string // "RoCE v2", "IB/RoCE v1", or "" when sysfs has no type
	ndev  string
}

// zeroGID is an unused GID table slot.
var zeroGID = netip.IPv6Unspecified()

// gids reads a port's GID table: gids/N, gid_attrs/types/N and
// gid_attrs/ndevs/N (unused slots are all zeros, their attributes fail to
// read with EINVAL).
func (h *host) gids(dev string, port int) []gidEntry {
	base := filepath.Join("sys/class/infiniband", dev, "ports", fmt.Sprint(port))
	if g, ok := h.gidTables[base]; ok {
		return g
	}
	var out []gidEntry
	for _, n := range h.dir(filepath.Join(base, "gids")) {
		var idx int
		if _, err := fmt.Sscan(n, &idx); err != nil {
			continue
		}
		s, err := h.read(filepath.Join(base, "gids", n))
		if err != nil {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a == zeroGID {
			continue
		}
		typ, _ := h.read(filepath.Join(base, "gid_attrs", "types", n))
		ndev, _ := h.read(filepath.Join(base, "gid_attrs", "ndevs", n))
		out = append(out, gidEntry{index: idx, addr: a, typ: typ, ndev: ndev})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].index < out[j].index })
	h.gidTables[base] = out
	return out
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Severity) UnmarshalText(b []byte) error {
	for _, v := range []Severity{OK, Warn, Error} {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("doctor: severity %q: want ok, warn or error", b)
}
