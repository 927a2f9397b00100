package srp_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/srp"
)

// linuxRead4K is an SRP_CMD as ib_srp sends a READ(10) of 8 sectors
// from LBA 0x1234 on LUN 1, its 4 KiB under one fast-registered MR:
// data-in direct (srp_map_data), written byte by byte from struct
// srp_cmd.
var linuxRead4K = []byte{
	0x02, 0x00, 0, 0, 0, 0x01, 0x00, 0x00, // SRP_CMD; buf_fmt: data-in direct; counts 0
	0x2a, 0x00, 0x01, 0x00, 0, 0, 0, 0, // tag: blk_mq_unique_tag, hwq 1, tag 42, native (little-endian)
	0, 0, 0, 0,
	0x00, 0x01, 0, 0, 0, 0, 0, 0, // LUN 1
	0, 0x00, 0, 0x00, // task_attr simple, add_cdb_len 0
	0x28, 0, 0, 0, 0x12, 0x34, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, // READ(10)
	0xff, 0xff, 0x88, 0x81, 0x04, 0xa3, 0xc0, 0x00, // va
	0x00, 0x01, 0x2a, 0x05, // key
	0x00, 0x00, 0x10, 0x00, // len 4096
}

var (
	read10  = []byte{0x28, 0, 0, 0, 0x12, 0x34, 0, 0, 0x08, 0}
	write10 = []byte{0x2a, 0, 0, 0, 0x20, 0, 0, 0, 0x80, 0}
	// cdb32 is a 32-byte variable-length CDB (READ(32)): 16 bytes of
	// additional CDB.
	cdb32 = append([]byte{0x7f, 0, 0, 0, 0, 0, 0, 0x18, 0x00, 0x09}, make([]byte, 22)...)
	// cdb20 is a 20-byte CDB: one word of additional CDB.
	cdb20     = append([]byte{0xc1}, make([]byte, 19)...)
	tableDesc = desc{va: 0xffff888107650000, key: 0x3400}
	immData   = bytes.Repeat([]byte{0xab, 0xcd}, 256)
)

// dirView is what a test reads of a DataBuf.
type dirView struct {
	Format srp.Format
	Offset int
	Descs  []desc
	Total  uint32
	Table  *desc
	InIU   bool
	Imm    []byte
}

func view(d srp.DataBuf) dirView {
	v := dirView{Format: d.Format(), Offset: d.Offset(), Total: d.TotalLength(), InIU: d.TableInIU(), Imm: d.ImmediateData()}
	for i, x := range d.All() {
		if y := d.At(i); !bytes.Equal(x, y) {
			panic(fmt.Sprintf("descriptor %d: All %v, At %v", i, x, y))
		}
		v.Descs = append(v.Descs, desc{x.VA(), x.Key(), x.Len()})
	}
	if t := d.Table(); t != nil {
		v.Table = &desc{t.VA(), t.Key(), t.Len()}
	}
	return v
}

func sum(ds []desc) (n uint32) {
	for _, d := range ds {
		n += d.len
	}
	return n
}

// cmdCase is a command and what a parser must read of it.
type cmdCase struct {
	name    string
	spec    cmdSpec
	immOff  int // the connection's
	len     int
	addCDB  int
	out, in dirView
}

func cmdCases() []cmdCase {
	none := func(off int) dirView { return dirView{Format: srp.FormatNone, Offset: off, InIU: true} }
	direct := func(off int, d desc) dirView {
		return dirView{Format: srp.FormatDirect, Offset: off, Descs: []desc{d}, Total: d.len, InIU: true}
	}
	indirect := func(off int, ds []desc, inIU int) dirView {
		return dirView{Format: srp.FormatIndirect, Offset: off, Descs: ds[:inIU], Total: sum(ds),
			Table: &desc{tableDesc.va, tableDesc.key, uint32(16 * len(ds))}, InIU: inIU == len(ds)}
	}
	imm := func(off int, data []byte) dirView {
		return dirView{Format: srp.FormatImmediate, Offset: off, Total: uint32(len(data)), InIU: true, Imm: data}
	}
	d1, d2, d3, d64 := descs(1), descs(2), descs(3), descs(64)
	return []cmdCase{
		{name: "TEST UNIT READY: no data", spec: cmdSpec{tag: 7, cdb: []byte{0, 0, 0, 0, 0, 0}},
			len: 48, out: none(48), in: none(48)},
		{name: "READ(10): data-in direct", spec: cmdSpec{tag: 0x1002a, lun: 1, cdb: read10, in: dirSpec{descs: d1}},
			len: 64, out: none(48), in: direct(48, d1[0])},
		{name: "WRITE(10): data-out direct", spec: cmdSpec{tag: 8, cdb: write10, out: dirSpec{descs: d1}},
			len: 64, out: direct(48, d1[0]), in: none(64)},
		{name: "READ: data-in indirect, 1 descriptor", spec: cmdSpec{tag: 9, cdb: read10, in: dirSpec{descs: d1, table: tableDesc, indirect: true}},
			len: 48 + 20 + 16, out: none(48), in: indirect(48, d1, 1)},
		{name: "READ: data-in indirect, 2 descriptors", spec: cmdSpec{tag: 10, cdb: read10, in: dirSpec{descs: d2, table: tableDesc}},
			len: 48 + 20 + 32, out: none(48), in: indirect(48, d2, 2)},
		{name: "WRITE: data-out indirect, 2 descriptors", spec: cmdSpec{tag: 11, cdb: write10, out: dirSpec{descs: d2, table: tableDesc}},
			len: 48 + 20 + 32, out: indirect(48, d2, 2), in: none(100)},
		{name: "READ: data-in indirect, 64 descriptors", spec: cmdSpec{tag: 12, cdb: read10, in: dirSpec{descs: d64, table: tableDesc}},
			len: 48 + 20 + 64*16, out: none(48), in: indirect(48, d64, 64)},
		{name: "WRITE: data-out indirect, 64 descriptors", spec: cmdSpec{tag: 13, cdb: write10, out: dirSpec{descs: d64, table: tableDesc}},
			len: 48 + 20 + 64*16, out: indirect(48, d64, 64), in: none(48 + 20 + 64*16)},
		{name: "READ: external table, 1 of 3 descriptors in the IU (allow_ext_sg)", spec: cmdSpec{tag: 14, cdb: read10, in: dirSpec{descs: d3, inIU: 1, table: tableDesc}},
			len: 48 + 20 + 16, out: none(48), in: indirect(48, d3, 1)},
		{name: "WRITE: immediate data", spec: cmdSpec{tag: 15, cdb: write10, out: dirSpec{imm: immData}, pad: 0xee},
			immOff: 68, len: 68 + len(immData), out: imm(48, immData), in: none(52)},
		{name: "WRITE: immediate data at srpt's largest offset, 80", spec: cmdSpec{tag: 16, cdb: write10, out: dirSpec{imm: immData}, immOff: 80},
			immOff: 80, len: 80 + len(immData), out: imm(48, immData), in: none(52)},
		{name: "WRITE: 1 byte of immediate data", spec: cmdSpec{tag: 17, cdb: write10, out: dirSpec{imm: []byte{0x5a}}},
			immOff: 68, len: 69, out: imm(48, []byte{0x5a}), in: none(52)},
		{name: "READ(32): additional CDB, data-in direct", spec: cmdSpec{tag: 18, cdb: cdb32, in: dirSpec{descs: d1}},
			len: 48 + 16 + 16, addCDB: 16, out: none(64), in: direct(64, d1[0])},
		{name: "20-byte CDB: 1 word of additional CDB, data-out indirect", spec: cmdSpec{tag: 19, cdb: cdb20, out: dirSpec{descs: d2, table: tableDesc}},
			len: 48 + 4 + 20 + 32, addCDB: 4, out: indirect(52, d2, 2), in: none(104)},
		{name: "additional CDB and immediate data", spec: cmdSpec{tag: 20, cdb: cdb32, out: dirSpec{imm: immData}},
			immOff: 68, len: 68 + len(immData), addCDB: 16, out: imm(64, immData), in: none(68)},
		{name: "bidirectional: data-out direct, data-in indirect", spec: cmdSpec{tag: 21, cdb: cdb32, out: dirSpec{descs: d1}, in: dirSpec{descs: d2, table: tableDesc}},
			len: 48 + 16 + 16 + 20 + 32, addCDB: 16, out: direct(64, d1[0]), in: indirect(80, d2, 2)},
		{name: "bidirectional: immediate data-out, data-in direct", spec: cmdSpec{tag: 22, cdb: read10, out: dirSpec{imm: immData}, in: dirSpec{descs: d1}},
			immOff: 68, len: 68 + len(immData), out: imm(48, immData), in: direct(52, d1[0])},
	}
}

func TestCmdVector(t *testing.T) {
	c, n, err := srp.ParseCmd(linuxRead4K, 68)
	if err != nil || n != 64 || c.Len() != 64 {
		t.Fatalf("n %d, Len %d, %v", n, c.Len(), err)
	}
	if c.Tag() != 0x1002a || c.LUN() != 0x0001000000000000 || c.TaskAttr() != srp.TaskAttrSimple || c.BufFmt() != 0x01 || c.CDB()[0] != 0x28 || c.AddCDBLen() != 0 {
		t.Errorf("tag %#x, LUN %#x, task attribute %d, buf_fmt %#x, CDB % x", c.Tag(), c.LUN(), c.TaskAttr(), c.BufFmt(), c.CDB())
	}
	want := dirView{Format: srp.FormatDirect, Offset: 48, Descs: []desc{{0xffff888104a3c000, 0x00012a05, 4096}}, Total: 4096, InIU: true}
	if d := cmp.Diff(want, view(c.DataIn()), cmp.AllowUnexported(desc{})); d != "" {
		t.Errorf("data-in (-want +got):\n%s", d)
	}
	s := cmdSpec{tag: 0x1002a, lun: 1, cdb: read10, in: dirSpec{descs: []desc{{0xffff888104a3c000, 0x00012a05, 4096}}}}
	if b := buildCmd(t, s); !bytes.Equal(b, linuxRead4K) {
		t.Errorf("the builder writes\n% x\nwant\n% x", b, linuxRead4K)
	}
}

func TestParseCmd(t *testing.T) {
	for _, tc := range cmdCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := buildCmd(t, tc.spec)
			if len(b) != tc.len {
				t.Fatalf("the builder wrote %d bytes, the case says %d", len(b), tc.len)
			}
			c, n, err := srp.ParseCmd(b, tc.immOff)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.len || c.Len() != tc.len || len(c.Bytes()) != tc.len {
				t.Errorf("n %d, Len %d, want %d", n, c.Len(), tc.len)
			}
			if c.Tag() != tc.spec.tag || c.AddCDBLen() != tc.addCDB || c.ImmDataOffset() != tc.immOff {
				t.Errorf("tag %#x, additional CDB %d bytes, immediate data offset %d", c.Tag(), c.AddCDBLen(), c.ImmDataOffset())
			}
			cdb := append(c.CDB(), c.AddCDB()...)
			if !bytes.HasPrefix(cdb, tc.spec.cdb) || len(cdb) != 16+tc.addCDB {
				t.Errorf("CDB % x, want % x", cdb, tc.spec.cdb)
			}
			opt := cmp.AllowUnexported(desc{})
			if d := cmp.Diff(tc.out, view(c.DataOut()), opt); d != "" {
				t.Errorf("data-out (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.in, view(c.DataIn()), opt); d != "" {
				t.Errorf("data-in (-want +got):\n%s", d)
			}
			if err := c.CheckLen(len(b)); err != nil {
				t.Error(err)
			}
			// Bytes after the command: the target takes them.
			long := append(bytes.Clone(b), 1, 2, 3)
			if c, n, err := srp.ParseCmd(long, tc.immOff); err != nil || n != tc.len || c.Len() != tc.len || c.CheckLen(len(long)) != nil {
				t.Errorf("3 bytes more: n %d, %v", n, err)
			}
		})
	}
}

// TestParseCmdHeader: every case parsed from its bytes up to the end of
// its descriptors (a message's first piece) finds the same descriptors
// as ParseCmd from the whole, and the same length, so that CheckLen
// checks the whole message: it takes the command's length and refuses
// one byte less, naming the immediate data when that is what is cut.
func TestParseCmdHeader(t *testing.T) {
	for _, tc := range cmdCases() {
		t.Run(tc.name, func(t *testing.T) {
			b := buildCmd(t, tc.spec)
			whole, _, err := srp.ParseCmd(b, tc.immOff)
			if err != nil {
				t.Fatal(err)
			}
			end := whole.DataIn().Offset() + len(descBytes(whole.DataIn()))
			if n, err := srp.CmdHeaderLen(b[:srp.CmdLen]); err != nil || n != end {
				t.Errorf("CmdHeaderLen: %d, %v; the descriptors end at %d", n, err, end)
			}
			c, n, err := srp.ParseCmdHeader(b[:end], tc.immOff)
			if err != nil {
				t.Fatalf("from its first %d bytes: %v", end, err)
			}
			if n != end || c.Len() != tc.len || len(c.Bytes()) != end {
				t.Errorf("n %d, Len %d, %d bytes: want %d, %d, %d", n, c.Len(), len(c.Bytes()), end, tc.len, end)
			}
			opt := cmp.AllowUnexported(desc{})
			want := tc.out
			want.Imm = nil
			if d := cmp.Diff(want, view(c.DataOut()), opt); d != "" {
				t.Errorf("data-out (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.in, view(c.DataIn()), opt); d != "" {
				t.Errorf("data-in (-want +got):\n%s", d)
			}
			if err := c.CheckLen(tc.len); err != nil {
				t.Error(err)
			}
			err = c.CheckLen(tc.len - 1)
			var e *srp.Error
			if !errors.Is(err, srp.ErrLength) || !errors.As(err, &e) {
				t.Fatalf("CheckLen(%d): %v, want ErrLength", tc.len-1, err)
			}
			if tc.out.Format == srp.FormatImmediate && e.Field != "immediate data" {
				t.Errorf("CheckLen(%d) names %q, want the immediate data", tc.len-1, e.Field)
			}
			if _, err := srp.CmdHeaderLen(b[:srp.CmdLen-1]); !errors.Is(err, srp.ErrTruncated) {
				t.Errorf("CmdHeaderLen of %d bytes: %v, want ErrTruncated", srp.CmdLen-1, err)
			}
			// One byte short of the descriptors is short of what the
			// header parse needs.
			if _, _, err := srp.ParseCmdHeader(b[:end-1], tc.immOff); !errors.Is(err, srp.ErrTruncated) {
				t.Errorf("from %d bytes: %v, want ErrTruncated", end-1, err)
			}
		})
	}
}

// descBytes is d's descriptor's bytes: its length in the message.
func descBytes(d srp.DataBuf) []byte {
	switch d.Format() {
	case srp.FormatDirect:
		return make([]byte, srp.DescLen)
	case srp.FormatIndirect:
		return make([]byte, srp.IndirectHeaderLen+d.Count()*srp.DescLen)
	case srp.FormatImmediate:
		return make([]byte, srp.ImmHeaderLen)
	}
	return nil
}

// span is the field a byte belongs to: its name and offset.
type span struct {
	name string
	off  int
}

// cmdSpans names each byte of a command as the kernel's struct srp_cmd
// names it, and the variable part as the parser should: the field the
// bytes end in when the command is cut before that byte. The bytes
// between the descriptors and the immediate data belong to the data.
func cmdSpans(tc cmdCase) []span {
	names := make([]span, tc.len)
	set := func(from, to int, name string) {
		for i := from; i < to; i++ {
			names[i] = span{name, from}
		}
	}
	for _, f := range []struct {
		name     string
		from, to int
	}{{"opcode", 0, 1}, {"sol_not", 1, 2}, {"reserved1", 2, 5}, {"buf_fmt", 5, 6}, {"data_out_desc_cnt", 6, 7},
		{"data_in_desc_cnt", 7, 8}, {"tag", 8, 16}, {"reserved2", 16, 20}, {"lun", 20, 28}, {"reserved3", 28, 29},
		{"task_attr", 29, 30}, {"reserved4", 30, 31}, {"add_cdb_len", 31, 32}, {"cdb", 32, 48}} {
		set(f.from, f.to, f.name)
	}
	set(48, 48+tc.addCDB, "additional CDB")
	end := 48 + tc.addCDB
	for _, d := range []struct {
		dir string
		v   dirView
	}{{"data-out", tc.out}, {"data-in", tc.in}} {
		o := d.v.Offset
		switch d.v.Format {
		case srp.FormatDirect:
			set(o, o+16, d.dir+" descriptor")
			end = o + 16
		case srp.FormatIndirect:
			set(o, o+16, d.dir+" table descriptor")
			set(o+16, o+20, d.dir+" total length")
			for i := range d.v.Descs {
				set(o+20+16*i, o+36+16*i, fmt.Sprintf("%s descriptor %d of %d", d.dir, i, len(d.v.Descs)))
			}
			end = o + 20 + 16*len(d.v.Descs)
		case srp.FormatImmediate:
			set(o, o+4, d.dir+" immediate data length")
			end = o + 4
		}
	}
	if tc.out.Format == srp.FormatImmediate {
		set(end, tc.len, "immediate data")
		for i := end; i < tc.len; i++ {
			names[i].off = tc.immOff
		}
	}
	return names
}

// TestCmdCutAtEveryPrefix: every prefix of every command fails, naming
// the field it ends in, both in ParseCmd and in the whole command's
// CheckLen.
func TestCmdCutAtEveryPrefix(t *testing.T) {
	for _, tc := range cmdCases() {
		b := buildCmd(t, tc.spec)
		whole, _, err := srp.ParseCmd(b, tc.immOff)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		names := cmdSpans(tc)
		for i := range b {
			c, n, err := srp.ParseCmd(b[:i:i], tc.immOff)
			var e *srp.Error
			if !errors.Is(err, srp.ErrTruncated) || !errors.As(err, &e) || n != 0 || c.Len() != 0 {
				t.Errorf("%s cut at %d: n %d, %v; want ErrTruncated", tc.name, i, n, err)
				continue
			}
			if got := (span{e.Field, e.Offset}); got != names[i] {
				t.Errorf("%s cut at %d: %v; want the field %q at %d", tc.name, i, err, names[i].name, names[i].off)
			}
			err = whole.CheckLen(i)
			if !errors.Is(err, srp.ErrLength) || !errors.As(err, &e) || (span{e.Field, e.Offset}) != names[i] {
				t.Errorf("%s: CheckLen(%d): %v; want ErrLength naming %q at %d", tc.name, i, err, names[i].name, names[i].off)
			}
		}
	}
}

func TestCmdRefuses(t *testing.T) {
	withFmt := func(f byte) []byte {
		b := bytes.Clone(linuxRead4K)
		b[5] = f
		return b
	}
	imm := buildCmd(t, cmdSpec{cdb: write10, out: dirSpec{imm: immData}})
	immBidi := buildCmd(t, cmdSpec{cdb: write10, out: dirSpec{imm: immData}, in: dirSpec{descs: descs(1)}})
	for _, tc := range []struct {
		name   string
		b      []byte
		immOff int
		want   error
		text   string
	}{
		{"data-out format 4", withFmt(0x40), 68, srp.ErrFormat, "srp: parse SRP_CMD: buf_fmt (byte 5): unsupported data buffer descriptor format: 0x40: data-out reserved format 4"},
		{"data-out format 15", withFmt(0xf1), 68, srp.ErrFormat, "data-out reserved format 15"},
		{"data-in immediate", withFmt(0x03), 68, srp.ErrFormat, "0x03: data-in immediate"},
		{"data-in format 7", withFmt(0x17), 68, srp.ErrFormat, "data-in reserved format 7"},
		{"immediate data, none negotiated", imm, 0, srp.ErrImmediate,
			"srp: parse SRP_CMD: buf_fmt (byte 5): immediate data without room for it: immediate data, but the connection's login fixed no immediate data offset"},
		{"immediate data inside the descriptors", imm, 50, srp.ErrImmediate,
			"immediate data (byte 50): immediate data without room for it: the connection's immediate data offset 50 lies inside the descriptors, which end at 52"},
		{"immediate data inside the data-in descriptor", immBidi, 60, srp.ErrImmediate, "which end at 68"},
		{"an SRP_RSP", tskMgmtRsp(1, 0), 68, srp.ErrOpcode, "srp: parse SRP_CMD: opcode (byte 0): unexpected opcode: SRP_RSP"},
		{"an unknown opcode", append([]byte{0x05}, linuxRead4K[1:]...), 68, srp.ErrOpcode, "SRP opcode 0x05"},
	} {
		c, n, err := srp.ParseCmd(tc.b, tc.immOff)
		if !errors.Is(err, tc.want) || n != 0 || c.Len() != 0 || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: n %d, %v; want %v saying %q", tc.name, n, err, tc.want, tc.text)
		}
	}
	// Immediate data cut short: truncated, naming the data.
	_, _, err := srp.ParseCmd(imm[:len(imm)-1], 68)
	if want := "srp: parse SRP_CMD: immediate data (byte 68): truncated: 579 bytes, need 580 (512 at 68)"; err == nil || err.Error() != want {
		t.Errorf("immediate data cut by one byte: %v, want %q", err, want)
	}
}

// TestCmdSetters: rewriting descriptors changes their va and key and
// no other byte: the whole message is compared with one patched at the
// kernel struct's offsets.
func TestCmdSetters(t *testing.T) {
	const va, key = 0x00007f0012340000, 0xa5a5a5a5
	patch := func(b []byte, at int, va uint64, key uint32) {
		putDesc(b[at:], desc{va, key, uint32(b[at+12])<<24 | uint32(b[at+13])<<16 | uint32(b[at+14])<<8 | uint32(b[at+15])})
	}
	for _, tc := range []struct {
		name   string
		spec   cmdSpec
		immOff int
		set    func(c srp.Cmd)
		want   func(b []byte)
	}{
		{"direct data-in", cmdSpec{cdb: read10, in: dirSpec{descs: descs(1)}}, 0,
			func(c srp.Cmd) { c.DataIn().At(0).Set(va, key) },
			func(b []byte) { patch(b, 48, va, key) }},
		{"direct data-out, va only", cmdSpec{cdb: write10, out: dirSpec{descs: descs(1)}}, 0,
			func(c srp.Cmd) { c.DataOut().At(0).SetVA(va) },
			func(b []byte) { patch(b, 48, va, 0x1200) }},
		{"direct data-in, key only, after an additional CDB", cmdSpec{cdb: cdb32, in: dirSpec{descs: descs(1)}}, 0,
			func(c srp.Cmd) { c.DataIn().At(0).SetKey(key) },
			func(b []byte) { patch(b, 64, 0xffff888100000000, key) }},
		{"indirect data-in, every descriptor and the table", cmdSpec{cdb: read10, in: dirSpec{descs: descs(3), table: tableDesc}}, 0,
			func(c srp.Cmd) {
				for i, d := range c.DataIn().All() {
					d.Set(va+uint64(i)<<16, key)
				}
				c.DataIn().Table().Set(va-0x1000, key+1)
			},
			func(b []byte) {
				patch(b, 48, va-0x1000, key+1)
				for i := range 3 {
					patch(b, 48+20+16*i, va+uint64(i)<<16, key)
				}
			}},
		{"indirect data-out, descriptor 1 of 2, after a 1-word additional CDB", cmdSpec{cdb: cdb20, out: dirSpec{descs: descs(2), table: tableDesc}}, 0,
			func(c srp.Cmd) { c.DataOut().At(1).Set(va, key) },
			func(b []byte) { patch(b, 52+20+16, va, key) }},
		{"bidirectional: the data-in descriptor alone", cmdSpec{cdb: read10, out: dirSpec{descs: descs(1)}, in: dirSpec{descs: descs(1)}}, 0,
			func(c srp.Cmd) { c.DataIn().At(0).Set(va, key) },
			func(b []byte) { patch(b, 64, va, key) }},
		{"immediate data: nothing to rewrite", cmdSpec{cdb: write10, out: dirSpec{imm: immData}}, 68,
			func(c srp.Cmd) {
				for _, d := range c.DataOut().All() {
					d.Set(va, key)
				}
				if c.DataOut().Table() != nil {
					t.Error("a table in an immediate descriptor")
				}
			},
			func([]byte) {}},
	} {
		b := buildCmd(t, tc.spec)
		want := bytes.Clone(b)
		tc.want(want)
		c, n, err := srp.ParseCmd(b, tc.immOff)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tc.set(c)
		if !bytes.Equal(b, want) {
			t.Errorf("%s: rewritten\n% x\nwant\n% x", tc.name, b, want)
		}
		if c2, n2, err := srp.ParseCmd(b, tc.immOff); err != nil || n2 != n || c2.DataIn().TotalLength() != c.DataIn().TotalLength() {
			t.Errorf("%s: the rewritten command: n %d, %v", tc.name, n2, err)
		}
	}
}

// TestDataBufAll: a range over All stops when the loop does.
func TestDataBufAll(t *testing.T) {
	c, _, err := srp.ParseCmd(buildCmd(t, cmdSpec{cdb: read10, in: dirSpec{descs: descs(5), table: tableDesc}}), 0)
	if err != nil {
		t.Fatal(err)
	}
	var seen []int
	for i := range c.DataIn().All() {
		if i == 2 {
			break
		}
		seen = append(seen, i)
	}
	if d := cmp.Diff([]int{0, 1}, seen); d != "" {
		t.Errorf("indexes (-want +got):\n%s", d)
	}
	if got := c.DataIn().At(4).String(); got != "va=0xffff888100040000 key=0x1204 len=4100" {
		t.Errorf("descriptor 4 reads %q", got)
	}
	if got := srp.Desc(nil).String(); got != "Desc(0 bytes)" {
		t.Errorf("an empty descriptor reads %q", got)
	}
	for f, want := range map[srp.Format]string{srp.FormatNone: "none", srp.FormatDirect: "direct", srp.FormatIndirect: "indirect", srp.FormatImmediate: "immediate", 9: "reserved format 9"} {
		if f.String() != want {
			t.Errorf("format %d reads %q, want %q", uint8(f), f, want)
		}
	}
}
