package nvme_test

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// filled returns n bytes of 0xFF, so that a byte an encoder never writes
// shows up in the round trip.
func filled(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

// keyed returns the fields of a keyed data block descriptor.
func keyed(addr uint64, length, key uint32, st nvme.SGLSubtype) nvme.SGLFields {
	return nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: st, Address: addr, Length: length, Key: key}
}

// capsule encodes an SQE with the given opcode and data pointer, flags
// 0x40 as a Linux host sends them, followed by tail.
func capsule(t testing.TB, op nvme.Opcode, dptr nvme.SGLFields, tail []byte) []byte {
	t.Helper()
	b := filled(nvme.CommandLen)
	nvme.Command(b).Encode(&nvme.CommandFields{
		Opcode: op, Flags: nvme.FlagSGLBuffer, CommandID: 0x1003, NSID: 1, DPTR: dptr,
		CDW10: [6]uint32{0x10, 0, 7},
	})
	return append(b, tail...)
}

// keyedList returns the bytes of an in-capsule list of keyed descriptors.
func keyedList(ds ...nvme.SGLFields) []byte {
	var b []byte
	for i := range ds {
		d := filled(nvme.SGLLen)
		nvme.SGL(d).Encode(&ds[i])
		b = append(b, d...)
	}
	return b
}

// listCapsule returns an SPDK-style capsule: a last-segment data pointer
// with offset 0 naming the keyed descriptors that follow the SQE.
func listCapsule(t testing.TB, op nvme.Opcode, ds ...nvme.SGLFields) []byte {
	t.Helper()
	ptr := nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: uint32(len(ds) * nvme.SGLLen)}
	return capsule(t, op, ptr, keyedList(ds...))
}

// inlineCapsule returns a capsule carrying data in-capsule at offset 0.
func inlineCapsule(t testing.TB, op nvme.Opcode, data []byte) []byte {
	t.Helper()
	ptr := nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: uint32(len(data))}
	return capsule(t, op, ptr, data)
}
