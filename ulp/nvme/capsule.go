package nvme

import "fmt"

// Capsule is a command capsule as ParseCapsule checked it: the 64-byte
// submission queue entry followed by the in-capsule bytes, which the
// RDMA binding uses for write data or for a list of SGL descriptors.
//
//	+---------------------+--------------------------------------+
//	| SQE (64 bytes)      | in-capsule bytes (0 .. IOCCSZ*16-64) |
//	+---------------------+--------------------------------------+
//	          data pointer: offset 0 is the first byte after the SQE
//
// The data pointer takes one of three forms over RDMA (DataKind):
//
//   - a keyed data block (0x40, or 0x4f to invalidate the key): host
//     memory the target reads or writes by RDMA. The Linux host's form for
//     every read, for admin-queue writes and for writes too big to inline;
//     with no data it sends a keyed descriptor of length 0
//     (nvme_rdma_set_sg_null).
//   - a data block with the offset subtype (0x01): the data is in the
//     capsule. The Linux host's form for I/O-queue writes that fit the
//     target's in-capsule size, the Connect of an I/O queue included
//     (nvme_rdma_map_sg_inline, with an offset of ICDOFF, which it
//     requires to be 0).
//   - a last segment with the offset subtype (0x31): the capsule holds a
//     list of keyed data blocks, each naming a piece of host memory. SPDK's
//     host sends it for scattered buffers (lib/nvme/nvme_rdma.c,
//     offset 0) and SPDK's target reads it (lib/nvmf/rdma.c,
//     nvmf_rdma_request_fill_iovs_multi_sgl); the Linux target does not
//     accept it.
//
// Offsets count from the first byte after the SQE, as both targets read
// them (the Linux target's inline pages and SPDK's recv->buf both begin
// there). SPDK's target adds a list's offset to a descriptor pointer, so
// it would scale a non-zero offset by 16; every host sends 0.
type Capsule struct {
	b     []byte
	kind  DataKind
	keyed SGLList
	data  []byte
}

// DataKind is the form of a capsule's data pointer.
type DataKind uint8

// Data pointer forms.
const (
	DataKeyed     DataKind = iota + 1 // one keyed descriptor in the SQE
	DataKeyedList                     // a last-segment list of keyed descriptors in the capsule
	DataInCapsule                     // the data itself in the capsule
)

var dataKindNames = [...]string{DataKeyed: "keyed", DataKeyedList: "keyed list", DataInCapsule: "in-capsule"}

func (k DataKind) String() string {
	if int(k) < len(dataKindNames) && dataKindNames[k] != "" {
		return dataKindNames[k]
	}
	return fmt.Sprintf("DataKind(%d)", uint8(k))
}

// ParseCapsule checks the command capsule b: an SQE whose PSDT selects
// SGLs and whose data pointer is one of the three forms above, every
// offset inside b, every list entry a keyed data block. It checks the
// whole capsule before returning, so a caller that rewrites the keyed
// descriptors never meets a fault halfway. It does not allocate.
//
// Bytes past what the data pointer names are allowed (a receive buffer
// longer than the capsule, or data after a list).
func ParseCapsule(b []byte) (Capsule, error) {
	const op = "parse capsule"
	if len(b) < CommandLen {
		return Capsule{}, truncated(op, CommandLen, len(b))
	}
	c := Command(b[:CommandLen])
	if p := c.PSDT(); p != PSDTSGLBuffer && p != PSDTSGLSegment {
		return Capsule{}, &Error{Op: op, Field: "flags", Offset: cmdFlags, Err: ErrNotSGL,
			Detail: fmt.Sprintf("PSDT %d", p)}
	}
	icd := b[CommandLen:] // in-capsule bytes
	d := c.DataPointer()
	switch d.Type() {
	case SGLKeyedDataBlock:
		if err := checkKeyed(op, "data pointer", cmdDPTR, d); err != nil {
			return Capsule{}, err
		}
		return Capsule{b: b, kind: DataKeyed, keyed: SGLList(d)}, nil
	case SGLDataBlock:
		if d.Subtype() != SGLOffset {
			return Capsule{}, subtypeError(op, "data pointer", cmdDPTR, d)
		}
		data, err := inCapsule(op, d, icd)
		if err != nil {
			return Capsule{}, err
		}
		return Capsule{b: b, kind: DataInCapsule, data: data}, nil
	case SGLLastSegment:
		if d.Subtype() != SGLOffset {
			return Capsule{}, subtypeError(op, "data pointer", cmdDPTR, d)
		}
		if n := d.Length(); n == 0 || n%SGLLen != 0 {
			return Capsule{}, &Error{Op: op, Field: "data pointer", Offset: cmdDPTR, Err: ErrSGLListLength,
				Detail: fmt.Sprintf("%d bytes, want a non-zero multiple of %d", n, SGLLen)}
		}
		list, err := inCapsule(op, d, icd)
		if err != nil {
			return Capsule{}, err
		}
		base := CommandLen + int(d.Address()) // inCapsule checked it fits
		for i := 0; i < len(list); i += SGLLen {
			e := SGL(list[i : i+SGLLen])
			field := "list entry"
			switch t := e.Type(); t {
			case SGLKeyedDataBlock:
				if err := checkKeyed(op, field, base+i, e); err != nil {
					return Capsule{}, err
				}
			case SGLSegment, SGLLastSegment:
				return Capsule{}, &Error{Op: op, Field: field, Offset: base + i, Err: ErrSGLNested,
					Detail: fmt.Sprintf("%v (identifier 0x%02x)", t, e.Identifier())}
			default:
				return Capsule{}, &Error{Op: op, Field: field, Offset: base + i, Err: ErrSGLType,
					Detail: fmt.Sprintf("%v (identifier 0x%02x) in a keyed list", t, e.Identifier())}
			}
		}
		return Capsule{b: b, kind: DataKeyedList, keyed: SGLList(list)}, nil
	default:
		return Capsule{}, &Error{Op: op, Field: "data pointer", Offset: cmdDPTR, Err: ErrSGLType,
			Detail: fmt.Sprintf("%v (identifier 0x%02x)", d.Type(), d.Identifier())}
	}
}

// checkKeyed checks a keyed data block's subtype: address or invalidate
// (the Linux target fails any other with Invalid Field,
// nvmet_rdma_map_sgl).
func checkKeyed(op, field string, off int, d SGL) error {
	if st := d.Subtype(); st != SGLAddress && st != SGLInvalidate {
		return subtypeError(op, field, off, d)
	}
	return nil
}

func subtypeError(op, field string, off int, d SGL) error {
	return &Error{Op: op, Field: field, Offset: off, Err: ErrSGLSubtype,
		Detail: fmt.Sprintf("%v with subtype 0x%x", d.Type(), uint8(d.Subtype()))}
}

// inCapsule returns the in-capsule bytes an offset descriptor names,
// checking offset and length without overflow (the Linux target's
// off+len check wrapped in u64 before it was fixed).
func inCapsule(op string, d SGL, icd []byte) ([]byte, error) {
	off, n, have := d.Address(), uint64(d.Length()), uint64(len(icd))
	if off > have || n > have-off {
		return nil, &Error{Op: op, Field: "data pointer", Offset: cmdDPTR, Err: ErrSGLBounds,
			Detail: fmt.Sprintf("offset %d length %d, %d in-capsule bytes", off, n, have)}
	}
	return icd[off : off+n : off+n], nil
}

// Command returns the capsule's submission queue entry.
func (c Capsule) Command() Command { return Command(c.b[:CommandLen:CommandLen]) }

// Kind returns the form of the data pointer.
func (c Capsule) Kind() DataKind { return c.kind }

// Keyed returns the keyed descriptors that name host memory: the SQE's
// data pointer (DataKeyed) or the in-capsule list (DataKeyedList); none
// for DataInCapsule. They are views into the capsule, to be rewritten in
// place. A descriptor of length 0 names nothing (the Linux host's "no
// data" pointer).
func (c Capsule) Keyed() SGLList { return c.keyed }

// InCapsuleData returns the data a DataInCapsule capsule carries (a view
// into it), nil for the other forms. The Connect data of an I/O queue's
// Connect travels here; an admin queue's Connect data is in host memory
// behind a keyed descriptor.
func (c Capsule) InCapsuleData() []byte { return c.data }

// Bytes returns the whole capsule given to ParseCapsule.
func (c Capsule) Bytes() []byte { return c.b }
