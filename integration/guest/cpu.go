package guest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPUTimes is the guest's CPU time by kind, from /proc/stat, in clock
// ticks: the machine-wide cost of a benchmark, both ends and the kernel's
// work included (steadier under TCG than rates).
type CPUTimes struct{ busy, softirq, idle uint64 }

// ReadCPUTimes reads /proc/stat's first line.
func ReadCPUTimes(tb testing.TB) CPUTimes {
	tb.Helper()
	t, err := readCPUTimes()
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func readCPUTimes() (CPUTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 8 || f[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t CPUTimes
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		switch i {
		case 3, 4: // idle, iowait
			t.idle += v
		case 6:
			t.softirq += v
			t.busy += v
		default:
			t.busy += v
		}
	}
	return t, nil
}

// ReportCPU reports the guest's CPU time per operation since start
// (cpu-us/op), and the share of it in softirq (the kernel's packet
// processing).
func ReportCPU(b *testing.B, start CPUTimes) {
	end := ReadCPUTimes(b)
	const tick = 10 * time.Millisecond // USER_HZ 100
	busy := time.Duration(end.busy-start.busy) * tick
	b.ReportMetric(float64(busy.Microseconds())/float64(b.N), "cpu-us/op")
	if end.busy > start.busy {
		b.ReportMetric(float64(end.softirq-start.softirq)/float64(end.busy-start.busy), "softirq-share")
	}
}
