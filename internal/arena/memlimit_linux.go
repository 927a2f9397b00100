//go:build linux

package arena

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"
)

// memLimit is one bound on how much more memory the process may populate.
type memLimit struct {
	what  string // what sets it, for the error that names it
	limit uint64 // the limit itself; 0 for a plain amount (MemAvailable)
	avail uint64 // what is left of it
}

func (l memLimit) describe() string {
	if l.limit == 0 {
		return fmt.Sprintf("%s is %s", l.what, FormatBytes(l.avail))
	}
	return fmt.Sprintf("%s of %s leaves %s", l.what, FormatBytes(l.limit), FormatBytes(l.avail))
}

// tightest returns the limit that leaves the least, if there is one.
func tightest(ls []memLimit) (memLimit, bool) {
	if len(ls) == 0 {
		return memLimit{}, false
	}
	t := ls[0]
	for _, l := range ls[1:] {
		if l.avail < t.avail {
			t = l
		}
	}
	return t, true
}

// memoryLimits reads, from the root file system fsys, what bounds the memory
// this process may still populate: the machine's MemAvailable, the memory
// limit of its cgroup and of every cgroup above it (v2 memory.max, v1
// memory.limit_in_bytes), and the address-space limit rlimitAS (RLIMIT_AS,
// ulimit -v; RLIM_INFINITY for none) less the address space in use. What
// cannot be read is left out: no bound rather than a wrong one.
func memoryLimits(fsys fs.FS, rlimitAS, pageSize uint64) []memLimit {
	var out []memLimit
	if b, err := fs.ReadFile(fsys, "proc/meminfo"); err == nil {
		if kb, ok := meminfoField(b, "MemAvailable"); ok {
			out = append(out, memLimit{what: "MemAvailable (/proc/meminfo)", avail: kb << 10})
		}
	}
	if b, err := fs.ReadFile(fsys, "proc/self/cgroup"); err == nil {
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			// hierarchy-ID:controllers:path; v2 is "0::path".
			f := strings.SplitN(s.Text(), ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				out = append(out, cgroupLimits(fsys, "sys/fs/cgroup", f[2], "memory.max", "memory.current")...)
			case hasController(f[1], "memory"):
				out = append(out, cgroupLimits(fsys, "sys/fs/cgroup/memory", f[2], "memory.limit_in_bytes", "memory.usage_in_bytes")...)
			}
		}
	}
	if rlimitAS != math.MaxUint64 {
		if b, err := fs.ReadFile(fsys, "proc/self/statm"); err == nil {
			if pages, err := strconv.ParseUint(strings.Fields(string(b) + " x")[0], 10, 64); err == nil {
				used := pages * pageSize
				out = append(out, memLimit{what: "the address-space limit (ulimit -v)", limit: rlimitAS, avail: rlimitAS - min(used, rlimitAS)})
			}
		}
	}
	return out
}

// cgroupLimits returns the memory limit of the cgroup at rel under mount
// and of each cgroup above it. A path that is not there (a cgroup namespace
// shows a path its mount does not have) falls back to the mount's root.
func cgroupLimits(fsys fs.FS, mount, rel, maxFile, usageFile string) []memLimit {
	dir := path.Join(mount, rel)
	if _, err := fs.Stat(fsys, dir); err != nil {
		dir = mount
	}
	var out []memLimit
	for {
		limit, lok := readCgroupValue(fsys, path.Join(dir, maxFile))
		usage, uok := readCgroupValue(fsys, path.Join(dir, usageFile))
		if lok && uok {
			out = append(out, memLimit{what: fmt.Sprintf("the cgroup's %s (/%s)", maxFile, dir), limit: limit, avail: limit - min(usage, limit)})
		}
		if dir == mount {
			return out
		}
		dir = path.Dir(dir)
	}
}

// readCgroupValue reads a byte count; "max" and v1's "unlimited" (a value
// near 2^63) are no limit.
func readCgroupValue(fsys fs.FS, name string) (uint64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v >= 1<<62 {
		return 0, false
	}
	return v, true
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// meminfoField returns the value of a "Name:   123 kB" line.
func meminfoField(b []byte, name string) (uint64, bool) {
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		return n, err == nil
	}
	return 0, false
}
