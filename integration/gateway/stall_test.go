package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// toolStates says, for each process whose name starts with prefix, its
// scheduler state and where in the kernel it waits (wchan): a perftest
// tool that spins on its CQ is R, one blocked for its next CM event
// sleeps in the RDMA CM's event wait.
func toolStates(prefix string) string {
	var b strings.Builder
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || !strings.HasPrefix(string(comm), prefix) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(d, "stat"))
		wchan, _ := os.ReadFile(filepath.Join(d, "wchan"))
		state := "?"
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		fmt.Fprintf(&b, "%s %s: state %s, wchan %q\n", filepath.Base(d), strings.TrimSpace(string(comm)), state, wchan)
	}
	return b.String()
}
