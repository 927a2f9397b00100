//go:build linux

package xdp_test

import (
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// syscallCounter counts the system calls the test process makes, by number:
// a BPF program on the raw tracepoint sys_enter that skips other
// processes. A benchmark reads it around its timed loop to report system
// calls per packet, whatever code (this branch's or another's) made them.
type syscallCounter struct {
	counts *ebpf.Map // array: syscall number -> count
}

// maxSyscall bounds the syscall numbers counted (x86-64 has about 460).
const maxSyscall = 512

func newSyscallCounter(tb testing.TB) *syscallCounter {
	tb.Helper()
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: maxSyscall})
	if err != nil {
		tb.Fatalf("syscall counter map: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.RawTracepoint,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1), // ctx: args[0] the registers, args[1] the syscall number
			asm.FnGetCurrentPidTgid.Call(),
			asm.RSh.Imm(asm.R0, 32),
			asm.JNE.Imm(asm.R0, int32(os.Getpid()), "exit"),
			asm.LoadMem(asm.R2, asm.R6, 8, asm.DWord),
			asm.JGE.Imm(asm.R2, maxSyscall, "exit"),
			asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "exit"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
			asm.Return(),
		},
	})
	if err != nil {
		tb.Fatalf("syscall counter program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: prog})
	if err != nil {
		tb.Fatalf("attach the syscall counter to sys_enter: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	return &syscallCounter{counts: m}
}

// syscallCounts are counts by syscall number.
type syscallCounts [maxSyscall]uint64

func (s *syscallCounter) read(tb testing.TB) syscallCounts {
	tb.Helper()
	var c syscallCounts
	for i := range c {
		if err := s.counts.Lookup(uint32(i), &c[i]); err != nil {
			tb.Fatalf("read the syscall counter: %v", err)
		}
	}
	return c
}

// report reports the system calls made since before, per op: those the
// packet path makes by name, and all but bpf (the generator's
// BPF_PROG_RUN, and the counter's own reads) as "syscalls/pkt".
func (s *syscallCounter) report(b *testing.B, before syscallCounts, ops int) {
	after := s.read(b)
	var all uint64
	for i := range after {
		if i != unix.SYS_BPF {
			all += after[i] - before[i]
		}
	}
	per := func(n uint64) float64 { return float64(n) / float64(ops) }
	b.ReportMetric(per(all), "syscalls/pkt")
	for _, sc := range []struct {
		nr   int
		name string
	}{
		{unix.SYS_SENDTO, "sendto/pkt"},
		{unix.SYS_RECVFROM, "recvfrom/pkt"},
		{unix.SYS_RECVMMSG, "recvmmsg/pkt"},
		{unix.SYS_EPOLL_PWAIT, "epoll_pwait/pkt"},
		{unix.SYS_FUTEX, "futex/pkt"},
	} {
		if n := after[sc.nr] - before[sc.nr]; n > 0 {
			b.ReportMetric(per(n), sc.name)
		}
	}
}
