package leg

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemlockHint: a pinning that failed with ENOMEM or EPERM under a
// locked-memory limit says the limit is the likely cause, with the limit,
// what it needed and the fix, and still matches its errno; other
// failures, an unlimited limit, CAP_IPC_LOCK (but on siw, which pins
// against the limit regardless) or an unreadable limit leave the error as
// it was, and a hint is never given twice.
func TestMemlockHint(t *testing.T) {
	regMR := func(errno syscall.Errno) error {
		return fmt.Errorf("ibv_reg_mr %d bytes access %v: %w", 128<<20, 1, errno) // as ibv wraps it
	}
	limited := func() memlockLimit { return memlockLimit{cur: 8 << 20, known: true} }
	const what = "ibv_reg_mr of the pool on mlx5_0"
	for _, tc := range []struct {
		name  string
		err   error
		limit func() memlockLimit
		hint  bool
	}{
		{"ENOMEM under 8 MiB", regMR(syscall.ENOMEM), limited, true},
		{"EPERM under 8 MiB", regMR(syscall.EPERM), limited, true},
		{"EINVAL", regMR(syscall.EINVAL), limited, false},
		{"unlimited", regMR(syscall.ENOMEM), func() memlockLimit { return memlockLimit{cur: math.MaxUint64, known: true} }, false},
		{"CAP_IPC_LOCK", regMR(syscall.ENOMEM), func() memlockLimit { return memlockLimit{cur: 8 << 20, ipcLock: true, known: true} }, false},
		{"limit unreadable", regMR(syscall.ENOMEM), func() memlockLimit { return memlockLimit{} }, false},
		{"hinted already", memlockHint(regMR(syscall.ENOMEM), what, 128<<20, false, limited), limited, true},
		{"nil", nil, limited, false},
		{"CAP_IPC_LOCK, siw", regMR(syscall.ENOMEM), func() memlockLimit { return memlockLimit{cur: 8 << 20, ipcLock: true, known: true} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := memlockHint(tc.err, what, 128<<20, strings.HasSuffix(tc.name, "siw"), tc.limit)
			var me *MemlockError
			if !tc.hint {
				if got != tc.err || errors.As(got, &me) {
					t.Errorf("got %v, want the error unchanged: %v", got, tc.err)
				}
				return
			}
			if !errors.As(got, &me) || !errors.Is(got, syscall.ENOMEM) && !errors.Is(got, syscall.EPERM) {
				t.Fatalf("got %v, want a *MemlockError that still matches its errno", got)
			}
			want := "ibv_reg_mr 134217728 bytes access 1: " + errors.Unwrap(me.Err).Error() + ": the locked-memory limit is the likely cause: RLIMIT_MEMLOCK (ulimit -l) is 8.0 MiB, and ibv_reg_mr of the pool on mlx5_0 pins 128.0 MiB, besides what the process pinned already (the gateway pins its pool once per verbs device and once per AF_XDP leg, and once more per connection of a protocol route staging on a device without memory windows; rbridge doctor --config FILE adds up all but the last): LimitMEMLOCK=infinity in the unit (dist/rbridge.service has it), or ulimit -l unlimited in the shell that starts rbridge (memlock in /etc/security/limits.conf)"
			if tc.name == "hinted already" {
				want = tc.err.Error()
			}
			if got.Error() != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
			if strings.Count(got.Error(), "likely cause") != 1 {
				t.Errorf("the hint given %d times", strings.Count(got.Error(), "likely cause"))
			}
		})
	}
}

// TestProcessMemlock: the limit the hint names is this process's
// RLIMIT_MEMLOCK, as getrlimit reads it.
func TestProcessMemlock(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("RLIMIT_MEMLOCK is read on Linux")
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil {
		t.Fatal(err)
	}
	if l := processMemlock(); !l.known || l.cur != rl.Cur {
		t.Errorf("processMemlock %+v, want the limit %d", l, rl.Cur)
	}
}
