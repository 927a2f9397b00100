// Package nvmetest builds the NVMe-oF messages a host and a controller
// exchange, as the tests of the packages that carry them need them.
package nvmetest

import (
	"bytes"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// Command encodes a command capsule as a Linux host sends one: the SQE
// (flags 0x40: SGLs) with the opcode, command ID, namespace 1 and data
// pointer, then tail (in-capsule bytes). The SQE's other bytes are 0xFF,
// to show any a reader takes for meaningful.
func Command(op nvme.Opcode, cid uint16, dptr nvme.SGLFields, tail []byte) []byte {
	b := bytes.Repeat([]byte{0xff}, nvme.CommandLen)
	nvme.Command(b).Encode(&nvme.CommandFields{Opcode: op, Flags: nvme.FlagSGLBuffer, CommandID: cid, NSID: 1, DPTR: dptr})
	return append(b, tail...)
}

// Keyed is a keyed data block naming n bytes at addr behind key.
func Keyed(addr uint64, n, key uint32, st nvme.SGLSubtype) nvme.SGLFields {
	return nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: st, Address: addr, Length: n, Key: key}
}

// Completion encodes a completion of command cid on submission queue 1.
func Completion(cid uint16, st nvme.Status) []byte {
	b := make([]byte, nvme.CompletionLen)
	nvme.Completion(b).Encode(&nvme.CompletionFields{CommandID: cid, Status: st, SQID: 1})
	return b
}
