//go:build linux

package arena

import (
	"errors"
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestMemoryLimits(t *testing.T) {
	const gib = 1 << 30
	meminfo := &fstest.MapFile{Data: []byte("MemTotal:       24684084 kB\nMemAvailable:    1048576 kB\n")}
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name     string
		fs       fstest.MapFS
		rlimitAS uint64
		want     []memLimit
	}{{
		name: "MemAvailable alone",
		fs:   fstest.MapFS{"proc/meminfo": meminfo},
		want: []memLimit{{what: "MemAvailable (/proc/meminfo)", avail: gib}},
	}, {
		name: "cgroup v2, nested, the parent without a limit",
		fs: fstest.MapFS{
			"proc/self/cgroup":                 file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max":     file("2147483648\n"),
			"sys/fs/cgroup/a/b/memory.current": file("536870912\n"),
			"sys/fs/cgroup/a/memory.max":       file("max\n"),
			"sys/fs/cgroup/a/memory.current":   file("536870912\n"),
		},
		want: []memLimit{{what: "the cgroup's memory.max (/sys/fs/cgroup/a/b)", limit: 2 * gib, avail: 1536 << 20}},
	}, {
		name: "cgroup v1 in a namespace: the path is not under the mount, the mount's root counts",
		fs: fstest.MapFS{
			"proc/self/cgroup":                           file("5:cpuacct,cpu:/x\n4:memory:/process_api/123\n0::/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("1073741824\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": file("1610612736\n"),
		},
		want: []memLimit{{what: "the cgroup's memory.limit_in_bytes (/sys/fs/cgroup/memory)", limit: gib, avail: 0}},
	}, {
		name: "cgroup v1 unlimited",
		fs: fstest.MapFS{
			"proc/self/cgroup":                           file("4:memory:/\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": file("774144000\n"),
		},
	}, {
		name:     "address-space limit",
		fs:       fstest.MapFS{"proc/self/statm": file("262144 403 375 5 0 123 0\n")},
		rlimitAS: 3 * gib,
		want:     []memLimit{{what: "the address-space limit (ulimit -v)", limit: 3 * gib, avail: 2 * gib}},
	}, {
		name:     "nothing readable",
		fs:       fstest.MapFS{"proc/self/statm": file("garbage\n"), "proc/meminfo": file("MemAvailable:\n")},
		rlimitAS: gib,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.rlimitAS == 0 {
				tc.rlimitAS = math.MaxUint64
			}
			got := memoryLimits(tc.fs, tc.rlimitAS, 4096)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(memLimit{})); diff != "" {
				t.Errorf("memoryLimits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTightestAndDescribe(t *testing.T) {
	l, ok := tightest([]memLimit{
		{what: "MemAvailable (/proc/meminfo)", avail: 3 << 30},
		{what: "the address-space limit (ulimit -v)", limit: 2 << 30, avail: 1536 << 20},
	})
	if want := "the address-space limit (ulimit -v) of 2.0 GiB leaves 1.5 GiB"; !ok || l.describe() != want {
		t.Errorf("tightest = %q, %v; want %q", l.describe(), ok, want)
	}
	if _, ok := tightest(nil); ok {
		t.Errorf("tightest of no limits: found one")
	}
}

// TestMapArenaTooLarge: more than this machine can populate is refused
// with the limit named, before the mapping.
func TestMapArenaTooLarge(t *testing.T) {
	_, err := Map(1<<50, Options{})
	if !errors.Is(err, ErrTooLarge) ||
		!(strings.Contains(err.Error(), "MemAvailable") || strings.Contains(err.Error(), "cgroup") || strings.Contains(err.Error(), "ulimit -v")) {
		t.Fatalf("Map(1 PiB): %v, want ErrTooLarge naming the limit", err)
	}
	t.Log(err)
}
