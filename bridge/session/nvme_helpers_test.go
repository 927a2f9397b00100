package session_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// The NVMe messages a host and a controller exchange, as the tests here
// build them (bridge's gateway tests build theirs alike).

// nvmeCommand encodes a command capsule as a Linux host sends one: the
// SQE (flags 0x40: SGLs) with the opcode, command ID and data pointer,
// then tail (in-capsule bytes).
func nvmeCommand(op nvme.Opcode, cid uint16, dptr nvme.SGLFields, tail []byte) []byte {
	b := bytes.Repeat([]byte{0xff}, nvme.CommandLen)
	nvme.Command(b).Encode(&nvme.CommandFields{Opcode: op, Flags: nvme.FlagSGLBuffer, CommandID: cid, NSID: 1, DPTR: dptr})
	return append(b, tail...)
}

// nvmeKeyed is a keyed data block naming n bytes at addr behind key.
func nvmeKeyed(addr uint64, n, key uint32, st nvme.SGLSubtype) nvme.SGLFields {
	return nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: st, Address: addr, Length: n, Key: key}
}

// nvmeCompletion encodes a completion of command cid.
func nvmeCompletion(cid uint16, st nvme.Status) []byte {
	b := make([]byte, nvme.CompletionLen)
	nvme.Completion(b).Encode(&nvme.CompletionFields{CommandID: cid, Status: st, SQID: 1})
	return b
}

// pollWCs waits for n completions on cq.
func pollWCs(t *testing.T, ctx context.Context, cq *transport.CQ, n int, what string) []transport.WC {
	t.Helper()
	var got []transport.WC
	wcs := make([]transport.WC, n)
	for len(got) < n {
		k, err := cq.PollWait(ctx, wcs[:n-len(got)])
		if err != nil {
			t.Fatalf("%s: %d of %d completions: %v", what, len(got), n, err)
		}
		got = append(got, wcs[:k]...)
	}
	return got
}
