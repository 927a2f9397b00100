//go:build linux

package leg

import (
	"golang.org/x/sys/unix"

	"github.com/prometheus/procfs"
)

// capIPCLock is CAP_IPC_LOCK's bit in /proc/self/status CapEff.
const capIPCLock = 14

// processMemlock reads this process's RLIMIT_MEMLOCK (getrlimit) and
// whether it has CAP_IPC_LOCK, as rbridge doctor's memlock check does.
func processMemlock() memlockLimit {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		return memlockLimit{}
	}
	l := memlockLimit{cur: rl.Cur, known: true}
	if p, err := procfs.Self(); err == nil {
		if st, err := p.NewStatus(); err == nil {
			l.ipcLock = st.CapEff&(1<<capIPCLock) != 0
		}
	}
	return l
}
