package xdp

import "github.com/cilium/ebpf"

// Programs returns the loaded classifier and the bare XDP_PASS program, for
// BPF_PROG_TEST_RUN in the tests.
func (p *Program) Programs() (classify, pass *ebpf.Program) {
	return p.objs.RbridgeClassify, p.objs.RbridgePass
}
