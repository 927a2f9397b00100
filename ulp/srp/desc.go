package srp

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// Desc is a memory descriptor, struct srp_direct_buf: a piece of the
// initiator's memory the target reaches with one RDMA READ or WRITE.
// Fields are big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  va (virtual address, 64)                     |  0
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  key (the R_Key)                              |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  len                                          | 12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The Linux initiator writes a fast-registered MR's iova and rkey, or,
// without memory registration, the DMA address and the PD's global rkey
// (srp_map_desc in drivers/infiniband/ulp/srp/ib_srp.c); the Linux
// target reads each with one rdma_rw context (srpt_alloc_rw_ctxs).
type Desc []byte

// DescLen is a memory descriptor's length.
const DescLen = 16

const (
	descVA  = 0
	descKey = 8
	descLen = 12
)

// IsValid reports whether d holds a whole descriptor: the precondition
// of every getter and setter.
func (d Desc) IsValid() bool { return len(d) >= DescLen }

func (d Desc) VA() uint64  { return be64(d, descVA) }
func (d Desc) Key() uint32 { return be32(d, descKey) }
func (d Desc) Len() uint32 { return be32(d, descLen) }

// SetVA, SetKey and Set rewrite the descriptor in place; the length
// stays: a staging buffer stands in for the same bytes.
func (d Desc) SetVA(va uint64)   { binary.BigEndian.PutUint64(d[descVA:], va) }
func (d Desc) SetKey(key uint32) { binary.BigEndian.PutUint32(d[descKey:], key) }
func (d Desc) Set(va uint64, key uint32) {
	d.SetVA(va)
	d.SetKey(key)
}

func (d Desc) String() string {
	if !d.IsValid() {
		return fmt.Sprintf("Desc(%d bytes)", len(d))
	}
	return fmt.Sprintf("va=%#x key=%#x len=%d", d.VA(), d.Key(), d.Len())
}

// Format is a data buffer descriptor format, one nibble of an SRP_CMD's
// buf_fmt: the data-out direction's in the high nibble, the data-in
// direction's in the low one (SRP_NO_DATA_DESC and friends in srp.h).
type Format uint8

// Descriptor formats.
const (
	// FormatNone: no data in this direction.
	FormatNone Format = 0
	// FormatDirect: one Desc.
	FormatDirect Format = 1
	// FormatIndirect: struct srp_indirect_buf, a table descriptor (a
	// Desc naming the whole descriptor table in the initiator's memory),
	// the total length, then the descriptor list: the first
	// data_out_desc_cnt (data_in_desc_cnt) descriptors of the table.
	FormatIndirect Format = 2
	// FormatImmediate (SRP-2, data-out only): struct srp_imm_buf, the
	// data's length; the data itself follows in the same SEND at the
	// offset the login fixed (ImmDataOffset).
	FormatImmediate Format = 3
)

var formatNames = [...]string{"none", "direct", "indirect", "immediate"}

func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("reserved format %d", uint8(f))
}

// Lengths of the descriptors before their lists.
const (
	IndirectHeaderLen = DescLen + 4 // table descriptor and total length
	ImmHeaderLen      = 4           // struct srp_imm_buf
)

// DataBuf is one direction's data buffer descriptor in an SRP_CMD, as
// ParseCmd found it: its format, and views of its bytes in the message.
// Rewriting its descriptors rewrites the message.
type DataBuf struct {
	format Format
	off    int    // where the descriptor starts in the message
	desc   []byte // direct: 16 bytes; indirect: 20 + 16 per listed descriptor; immediate: 4
	imm    []byte // the immediate data
}

// Format is the direction's descriptor format.
func (d DataBuf) Format() Format { return d.format }

// Offset is where the direction's descriptor starts in the message (for
// FormatNone, where it would).
func (d DataBuf) Offset() int { return d.off }

// Count is the number of memory descriptors the message holds for this
// direction: 1 for a direct descriptor, the descriptor list's length for
// an indirect one, 0 otherwise.
func (d DataBuf) Count() int {
	switch d.format {
	case FormatDirect:
		return 1
	case FormatIndirect:
		return (len(d.desc) - IndirectHeaderLen) / DescLen
	}
	return 0
}

// At is memory descriptor i, 0 <= i < Count(), a view into the message.
func (d DataBuf) At(i int) Desc {
	off := 0
	if d.format == FormatIndirect {
		off = IndirectHeaderLen
	}
	off += i * DescLen
	return Desc(d.desc[off : off+DescLen : off+DescLen])
}

// All yields each memory descriptor with its index.
func (d DataBuf) All() iter.Seq2[int, Desc] {
	return func(yield func(int, Desc) bool) {
		for i := range d.Count() {
			if !yield(i, d.At(i)) {
				return
			}
		}
	}
}

// Table is an indirect descriptor's table descriptor: where the whole
// descriptor table lies in the initiator's memory; nil for the other
// formats. The Linux initiator fills it in even when the whole table is
// in the message (srp_map_data), with a key of its own (a
// fast-registered MR, srp_map_idb, or the global rkey): rewrite it too.
func (d DataBuf) Table() Desc {
	if d.format != FormatIndirect {
		return nil
	}
	return Desc(d.desc[:DescLen:DescLen])
}

// TotalLength is the bytes the direction moves: a direct descriptor's
// length, an indirect descriptor's total length field, the immediate
// data's length; 0 without data.
func (d DataBuf) TotalLength() uint32 {
	switch d.format {
	case FormatDirect:
		return Desc(d.desc).Len()
	case FormatIndirect:
		return be32(d.desc, DescLen)
	case FormatImmediate:
		return be32(d.desc, 0)
	}
	return 0
}

// TableInIU reports whether the target finds every memory descriptor
// of this direction in the message: true unless the format is indirect
// and the table (table descriptor length / 16 descriptors, as srpt
// counts them) is longer than the list the message carries, so that the
// target would have to RDMA READ the rest from the initiator's memory.
// The Linux target refuses such a command (srpt_get_desc_tbl; it checks
// the table against both directions' counts together); the Linux
// initiator sends one only with allow_ext_sg, for more descriptors than
// its cmd_sg_entries (srp_map_data).
func (d DataBuf) TableInIU() bool {
	if d.format != FormatIndirect {
		return true
	}
	return uint64(d.Table().Len()/DescLen) <= uint64(d.Count())
}

// ImmediateData is the data an immediate descriptor announces, a view
// into the message; nil for the other formats.
func (d DataBuf) ImmediateData() []byte { return d.imm }

// parseBuf checks the descriptor of format f for direction dir at off in
// b (count listed descriptors if indirect) and returns it and where it
// ends.
func parseBuf(b []byte, off int, f Format, count int, dir string) (DataBuf, int, error) {
	const op = "parse SRP_CMD"
	d := DataBuf{format: f, off: off}
	n := off
	switch f {
	case FormatNone:
		return d, off, nil
	case FormatDirect:
		n += DescLen
		if len(b) < n {
			return DataBuf{}, 0, truncated(op, dir+" descriptor", off, n, len(b))
		}
	case FormatIndirect:
		n += IndirectHeaderLen + count*DescLen
		switch {
		case len(b) < off+DescLen:
			return DataBuf{}, 0, truncated(op, dir+" table descriptor", off, n, len(b))
		case len(b) < off+IndirectHeaderLen:
			return DataBuf{}, 0, truncated(op, dir+" total length", off+DescLen, n, len(b))
		case len(b) < n:
			i := (len(b) - off - IndirectHeaderLen) / DescLen
			return DataBuf{}, 0, truncated(op, fmt.Sprintf("%s descriptor %d of %d", dir, i, count), off+IndirectHeaderLen+i*DescLen, n, len(b))
		}
	case FormatImmediate:
		n += ImmHeaderLen
		if len(b) < n {
			return DataBuf{}, 0, truncated(op, dir+" immediate data length", off, n, len(b))
		}
	}
	d.desc = b[off:n:n]
	return d, n, nil
}
