// Package portcounters reads an RDMA port's state and counters from sysfs
// (/sys/class/infiniband/DEVICE/ports/PORT): the IBTA port counters
// (counters/, counters_ext/) and the driver's own (hw_counters/: mlx5's
// np_cnp_sent, rxe's rcvd_seq_err, ...). prometheus/procfs parses the
// names it knows, with its fixes (the data counters in bytes, a PMA that
// answers "N/A"); the rest of hw_counters, which differs per driver, is
// read file by file. rbridge doctor watches some of them rise, and the
// gateway's /metrics exports them per verbs leg.
package portcounters

// The directories of a port that hold counters.
const (
	DirCounters    = "counters"     // IBTA PortCounters (a PMA's), also on RoCE HCAs
	DirCountersExt = "counters_ext" // the 64-bit ones of kernels before 4.5
	DirHW          = "hw_counters"  // the driver's own
)

// Counter is one counter of a port.
type Counter struct {
	Dir   string // DirCounters, DirCountersExt or DirHW
	Name  string // the file's name, as the driver spells it
	Value uint64
	// Bytes says the value counts bytes: the data counters, which the
	// kernel reports in 4-byte words and procfs scales.
	Bytes bool
}

// Port is a port's state and counters at one moment.
type Port struct {
	Device string
	Port   int
	// State and PhysState are the port's states as sysfs names them
	// ("ACTIVE", "DOWN", ...; "LinkUp", "Disabled", ...).
	State, PhysState string
	LinkLayer        string // "InfiniBand" or "Ethernet"
	Rate             uint64 // bytes per second
	// Counters are sorted by Dir, then Name; a counter the driver could
	// not read (a PMA that answers N/A) is left out.
	Counters []Counter
}

// Get returns the value of the counter dir/name, if the port has it.
func (p *Port) Get(dir, name string) (uint64, bool) {
	for _, c := range p.Counters {
		if c.Dir == dir && c.Name == name {
			return c.Value, true
		}
	}
	return 0, false
}

// Active reports whether the port's state is ACTIVE (it carries traffic).
func (p *Port) Active() bool { return p.State == "ACTIVE" }
