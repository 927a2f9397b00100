//go:build linux

package portcounters

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs/sysfs"
)

// lifespan is not a counter: it is how long (ms) the driver keeps its
// counters' values before reading them again.
const lifespan = "lifespan"

// ReadState reads only device's port's state and physical state
// ("ACTIVE", "LinkUp") from the sysfs mounted at sysRoot ("/sys"): two
// files, where Read reads every counter (on an HCA a counter may be a
// query to its firmware). A link watched twice a second needs no more.
func ReadState(sysRoot, device string, port int) (state, physState string, err error) {
	if port < 0 || device == "" || strings.ContainsRune(device, '/') {
		return "", "", fmt.Errorf("read %s port %d state: no such port", device, port)
	}
	dir := filepath.Join(sysRoot, "class", "infiniband", device, "ports", strconv.Itoa(port))
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("read %s port %d state: %w", device, port, err)
		}
		// "4: ACTIVE", "5: LinkUp": the number, then the name.
		v := strings.TrimSpace(string(b))
		if _, name, ok := strings.Cut(v, ": "); ok {
			return name, nil
		}
		return "", fmt.Errorf("read %s port %d state: %s holds %q, not \"N: NAME\"", device, port, name, v)
	}
	if state, err = read("state"); err != nil {
		return "", "", err
	}
	if physState, err = read("phys_state"); err != nil {
		return "", "", err
	}
	return state, physState, nil
}

// Read reads device's port from the sysfs mounted at sysRoot ("/sys").
func Read(sysRoot, device string, port int) (Port, error) {
	fs, err := sysfs.NewFS(sysRoot)
	if err != nil {
		return Port{}, fmt.Errorf("read %s port %d: %w", device, port, err)
	}
	dev, err := fs.InfiniBandDevice(device)
	if err != nil {
		return Port{}, fmt.Errorf("read %s port %d: %w", device, port, err)
	}
	if port < 0 {
		return Port{}, fmt.Errorf("read %s port %d: no such port", device, port)
	}
	ip, ok := dev.Ports[uint(port)]
	if !ok {
		return Port{}, fmt.Errorf("read %s port %d: not in %s's sysfs", device, port, device)
	}
	p := Port{Device: device, Port: port, State: ip.State, PhysState: ip.PhysState, LinkLayer: ip.LinkLayer, Rate: ip.Rate}
	known := map[string]bool{}
	for _, k := range procfsCounters {
		known[k.dir+"/"+k.name] = true
		if v := k.get(&ip); v != nil {
			p.Counters = append(p.Counters, Counter{Dir: k.dir, Name: k.name, Value: *v, Bytes: k.bytes})
		}
	}
	// The driver's counters procfs does not know.
	dir := filepath.Join(sysRoot, "class", "infiniband", device, "ports", strconv.Itoa(port), DirHW)
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Port{}, fmt.Errorf("read %s port %d: %w", device, port, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || known[DirHW+"/"+e.Name()] || e.Name() == lifespan {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // unreadable now (EINVAL, EOPNOTSUPP): as procfs does, left out
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue // not a counter
		}
		p.Counters = append(p.Counters, Counter{Dir: DirHW, Name: e.Name(), Value: v})
	}
	sort.Slice(p.Counters, func(i, j int) bool {
		a, b := &p.Counters[i], &p.Counters[j]
		if a.Dir != b.Dir {
			return a.Dir < b.Dir
		}
		return a.Name < b.Name
	})
	return p, nil
}
