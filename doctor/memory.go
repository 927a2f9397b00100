package doctor

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/procfs"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
)

// capIPCLock is CAP_IPC_LOCK's bit in /proc/PID/status CapEff.
const capIPCLock = 14

// checkMemory checks that the pool can be backed by huge pages and pinned:
// ibv_reg_mr (on each verbs leg's PD) and an AF_XDP UMEM count against
// RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK, and siw's (an iWARP
// device, among the legs' rdmas) even then.
func (h *host) checkMemory(rdmas []rdmaTarget) {
	proc, err := procfs.NewFS(filepath.Join(h.o.Root, "proc"))
	if err != nil {
		h.finding("memlock", "host", nil, Warn, fmt.Sprintf("procfs unreadable: %v", err), "")
		return
	}
	h.checkHugepages(proc)
	need, why := h.pinned()
	self, err := proc.Self()
	if err != nil {
		h.finding("memlock", "host", nil, Warn, fmt.Sprintf("this process's limits unreadable: %v", err), "")
		return
	}
	// siw (iWARP) pins against the limit regardless of CAP_IPC_LOCK, and,
	// staging for a protocol route, once more per connection.
	var iwarp []string
	for _, t := range rdmas {
		if t.leg != nil && h.iwarp(t.dev) && !slices.Contains(iwarp, t.dev) {
			iwarp = append(iwarp, t.dev)
		}
	}
	if len(iwarp) > 0 {
		why += fmt.Sprintf("; iWARP device %s pins against RLIMIT_MEMLOCK even with CAP_IPC_LOCK (siw does), and once more per connection of a protocol route", strings.Join(iwarp, ", "))
	}
	st, serr := self.NewStatus()
	if serr == nil && st.CapEff&(1<<capIPCLock) != 0 && len(iwarp) == 0 {
		h.finding("memlock", "host", nil, OK, fmt.Sprintf("CAP_IPC_LOCK: pinning %s (%s) is not bounded by RLIMIT_MEMLOCK", formatBytes(need), why), "")
		return
	}
	lim, err := self.Limits()
	if err != nil {
		h.finding("memlock", "host", nil, Warn, fmt.Sprintf("this process's limits unreadable: %v", err), "")
		return
	}
	have := lim.LockedMemory
	withoutCap := " without CAP_IPC_LOCK"
	if len(iwarp) > 0 {
		withoutCap = "" // why says the capability does not lift it
	}
	fix := leg.MemlockFix + "; this checks rbridge doctor's own limit"
	switch {
	case have == math.MaxUint64:
		h.finding("memlock", "host", nil, OK, fmt.Sprintf("RLIMIT_MEMLOCK unlimited: %s to pin (%s)", formatBytes(need), why), "")
	case have < uint64(need):
		h.finding("memlock", "host", nil, Error,
			fmt.Sprintf("RLIMIT_MEMLOCK %s, below the %s the gateway pins (%s)%s: ibv_reg_mr or the AF_XDP UMEM fails with ENOMEM/EPERM", formatBytes(int64(have)), formatBytes(need), why, withoutCap), fix)
	default:
		h.finding("memlock", "host", nil, OK, fmt.Sprintf("RLIMIT_MEMLOCK %s covers the %s the gateway pins (%s)", formatBytes(int64(have)), formatBytes(need), why), "")
	}
}

// pinned is what the gateway pins: the pool once per verbs leg (each PD
// registers it) and once per AF_XDP leg (the pool is its UMEM, which the
// socket registers and the kernel charges again). Without a config, one
// verbs leg.
func (h *host) pinned() (int64, string) {
	verbs, afxdp := 1, 0
	if c := h.o.Config; c != nil {
		verbs = 0
		for _, l := range c.Legs {
			switch {
			case l.Kind == config.KindVerbs:
				verbs++
			case l.Kind == config.KindUserspace && l.IO == config.IOAFXDP:
				afxdp++
			}
		}
	}
	need := int64(verbs+afxdp) * h.o.PoolSize
	var parts []string
	if verbs > 0 {
		parts = append(parts, fmt.Sprintf("the %s pool registered on %d verbs leg(s)", formatBytes(h.o.PoolSize), verbs))
	}
	if afxdp > 0 {
		parts = append(parts, fmt.Sprintf("as the UMEM of %d AF_XDP leg(s)", afxdp))
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing: no verbs or AF_XDP leg")
	}
	return need, strings.Join(parts, " and ")
}

// checkHugepages checks that free hugetlb pages hold the pool; else it is
// backed by transparent huge pages where those are on, 4 KiB pages if not.
func (h *host) checkHugepages(proc procfs.FS) {
	mi, err := proc.Meminfo()
	if err != nil || mi.HugePagesFree == nil || mi.HugepagesizeBytes == nil {
		h.finding("hugepages", "host", nil, Warn, fmt.Sprintf("/proc/meminfo unreadable or without HugePages_Free: %v", err), "")
		return
	}
	size := int64(*mi.HugepagesizeBytes)
	free := int64(*mi.HugePagesFree) * size
	pages := (h.o.PoolSize + size - 1) / max(size, 1)
	if free >= h.o.PoolSize {
		h.finding("hugepages", "host", nil, OK, fmt.Sprintf("%d free huge pages of %s hold the %s pool", *mi.HugePagesFree, formatBytes(size), formatBytes(h.o.PoolSize)), "")
		return
	}
	thp, _ := h.read("sys/kernel/mm/transparent_hugepage/enabled")
	fix := fmt.Sprintf("reserve huge pages for the pool: sysctl -w vm.nr_hugepages=%d (more if other programs use them), vm.nr_hugepages in /etc/sysctl.d to keep it", int64(*mi.HugePagesTotal)+pages-int64(*mi.HugePagesFree))
	if strings.Contains(thp, "[always]") || strings.Contains(thp, "[madvise]") {
		h.finding("hugepages", "host", nil, Warn,
			fmt.Sprintf("%d free huge pages (%s) do not hold the %s pool: it falls back to transparent huge pages (%s), which the kernel may not find contiguous", *mi.HugePagesFree, formatBytes(free), formatBytes(h.o.PoolSize), thp), fix)
		return
	}
	h.finding("hugepages", "host", nil, Warn,
		fmt.Sprintf("no huge pages for the %s pool and transparent huge pages off (%q): the pool is in 4 KiB pages, 512 times the translation entries on the NIC", formatBytes(h.o.PoolSize), thp), fix)
}

// formatBytes writes n in KiB, MiB or GiB where it divides.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
