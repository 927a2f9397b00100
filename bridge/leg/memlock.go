package leg

import (
	"errors"
	"fmt"
	"math"
	"syscall"

	"github.com/rbridge/rbridge/internal/arena"
)

// MemlockFix is what raises the locked-memory limit, as the memlock hint
// and rbridge doctor's memlock check say it.
const MemlockFix = "LimitMEMLOCK=infinity in the unit (dist/rbridge.service has it), or ulimit -l unlimited in the shell that starts rbridge (memlock in /etc/security/limits.conf)"

// A MemlockError is a failure to pin memory (ibv_reg_mr of the pool, an
// AF_XDP UMEM) that the locked-memory limit, RLIMIT_MEMLOCK, likely
// caused: the kernel answers ENOMEM or EPERM when pinning more would pass
// it, for a process without CAP_IPC_LOCK. It says so, with the limit, what
// the pinning needed and the fix.
type MemlockError struct {
	Err   error  // the pinning's own error
	What  string // what was pinned ("ibv_reg_mr of the pool on mlx5_0")
	Need  int64  // the bytes it pins
	Limit uint64 // RLIMIT_MEMLOCK's soft limit, in bytes
}

func (e *MemlockError) Error() string {
	return fmt.Sprintf("%v: the locked-memory limit is the likely cause: RLIMIT_MEMLOCK (ulimit -l) is %s, and %s pins %s, besides what the process pinned already (the gateway pins its pool once per verbs device and once per AF_XDP leg, and once more per connection of a protocol route staging on a device without memory windows; rbridge doctor --config FILE adds up all but the last): %s",
		e.Err, arena.FormatBytes(e.Limit), e.What, arena.FormatBytes(uint64(max(e.Need, 0))), MemlockFix)
}

func (e *MemlockError) Unwrap() error { return e.Err }

// memlockLimit is what bounds pinning for a process: RLIMIT_MEMLOCK's
// soft limit, and whether the process has CAP_IPC_LOCK (which lifts it).
type memlockLimit struct {
	cur     uint64 // math.MaxUint64: unlimited
	ipcLock bool
	known   bool // false: unreadable, no hint
}

// MemlockHint returns err, the failure of pinning need bytes for what,
// as a *MemlockError when the locked-memory limit likely caused it (an
// ENOMEM or EPERM, a limit that is not unlimited, no CAP_IPC_LOCK); else
// err as it is. An error that has the hint already keeps it.
func MemlockHint(err error, what string, need int64) error {
	return memlockHint(err, what, need, false, processMemlock)
}

// MemlockHintUncapped is MemlockHint for a driver that bounds its
// pinning by RLIMIT_MEMLOCK even with CAP_IPC_LOCK: siw's registrations
// (siw_umem_get) are.
func MemlockHintUncapped(err error, what string, need int64) error {
	return memlockHint(err, what, need, true, processMemlock)
}

func memlockHint(err error, what string, need int64, uncapped bool, limit func() memlockLimit) error {
	var me *MemlockError
	if err == nil || errors.As(err, &me) || !errors.Is(err, syscall.ENOMEM) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	l := limit()
	if !l.known || l.ipcLock && !uncapped || l.cur == math.MaxUint64 {
		return err
	}
	return &MemlockError{Err: err, What: what, Need: need, Limit: l.cur}
}
