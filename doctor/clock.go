package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// clockDir is where the kernel says which clocksource it reads.
const clockDir = "sys/devices/system/clocksource/clocksource0/"

// vdsoClocks are the clocksources the kernel's vDSO reads in user space
// (x86: the TSC, and the paravirtual clocks of KVM and Hyper-V that scale
// it; arm64's, powerpc's, s390's and riscv's counters). On any other
// (hpet, acpi_pm, jiffies) clock_gettime is a system call.
var vdsoClocks = []string{"tsc", "kvm-clock", "hyperv_clocksource_tsc_page", "arch_sys_counter", "timebase", "tod", "riscv_clocksource"}

// checkClocksource checks that reading the clock stays in user space. The
// gateway reads it many times per packet: Go's scheduler and timers, the
// transport's retransmission timers and round-trip samples. On a clock
// the vDSO cannot read, each of those reads is a system call.
func (h *host) checkClocksource() {
	cur, err := h.read(clockDir + "current_clocksource")
	if err != nil {
		h.finding("clocksource", "host", nil, Warn, fmt.Sprintf("the kernel's clocksource is unreadable: %v", err), "")
		return
	}
	if slices.Contains(vdsoClocks, cur) {
		h.finding("clocksource", "host", nil, OK, fmt.Sprintf("clocksource %s: clock reads stay in user space (vDSO)", cur), "")
		return
	}
	avail, _ := h.read(clockDir + "available_clocksource")
	msg := fmt.Sprintf("clocksource %s: the vDSO cannot read it, so every clock read is a system call; the gateway reads the clock many times per packet (in a qemu guest on hpet, 33 clock system calls per ib_send_lat iteration through it)", cur)
	var fix string
	switch {
	case slices.Contains(strings.Fields(avail), "tsc"):
		fix = "echo tsc > /" + clockDir + "current_clocksource (and clocksource=tsc on the kernel command line to keep it)"
	default:
		fix = fmt.Sprintf("the kernel did not accept the TSC (available: %s): where it is constant and synchronized across CPUs (constant_tsc and nonstop_tsc in /proc/cpuinfo; in a VM, as its hypervisor says), boot with tsc=reliable; in a KVM guest, kvm-clock is read in user space too", orNone(strings.Fields(avail)))
	}
	h.finding("clocksource", "host", nil, Warn, msg, fix)
}
