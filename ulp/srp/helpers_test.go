package srp_test

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// The builders here write messages the way the Linux kernel does, from
// its struct layouts (include/scsi/srp.h), not from this package's
// offsets: ib_srp's srp_queuecommand and srp_map_data for commands,
// srp_send_tsk_mgmt, srp_send_req; ib_srpt's srpt_build_cmd_rsp,
// srpt_build_tskmgmt_rsp and srpt_cm_req_recv for the target's messages.

// filled returns n bytes of 0xFF, so that a byte a builder never writes
// shows, and a parser that reads it does too.
func filled(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

// desc is one memory descriptor's values.
type desc struct {
	va       uint64
	key, len uint32
}

func putDesc(b []byte, d desc) {
	binary.BigEndian.PutUint64(b, d.va)
	binary.BigEndian.PutUint32(b[8:], d.key)
	binary.BigEndian.PutUint32(b[12:], d.len)
}

// dirSpec is one direction of a command: its descriptors (as
// srp_map_data leaves them in req->indirect_desc), how many of them fit
// in the command (cmd_sg_entries; 0 means all), the table's own address
// and key, or immediate data.
type dirSpec struct {
	descs []desc
	inIU  int
	table desc // va and key; its length is computed
	// indirect forces an indirect descriptor for a single memory
	// descriptor (the Linux initiator sends a direct one).
	indirect bool
	imm      []byte
}

// cmdSpec is a command.
type cmdSpec struct {
	tag     uint64
	lun     uint64 // as int_to_scsilun takes it
	cdb     []byte
	out, in dirSpec
	immOff  int // where immediate data goes: SRP_IMM_DATA_OFFSET, 68, unless set
	pad     byte
}

// buildCmd writes a command as srp_queuecommand and srp_map_data do
// (and, for the two directions at once, as SRP lays it out: the Linux
// initiator sends one direction only). Bytes the initiator does not
// write (between the immediate data descriptor and the data) hold
// s.pad: ib_srp clears only the 48-byte struct in an IU buffer it
// reuses.
func buildCmd(t testing.TB, s cmdSpec) []byte {
	t.Helper()
	b := bytes.Repeat([]byte{s.pad}, 4096)
	clear(b[:48]) // memset(cmd, 0, sizeof *cmd)
	b[0] = 0x02
	intToSCSILUN(b[20:28], s.lun)
	binary.LittleEndian.PutUint64(b[8:], s.tag) // cmd->tag = tag, a native u64
	copy(b[32:48], s.cdb)
	if len(s.cdb) > 16 {
		add := (len(s.cdb) - 16 + 3) &^ 3 // round_up(cmd_len - 16, 4)
		b[31] = byte(add)
		copy(b[48:], s.cdb[16:])
		clear(b[48+len(s.cdb)-16 : 48+add])
	}
	n := 48 + int(b[31])
	var fmtOut, fmtIn byte
	n, fmtOut = buildDir(t, b, n, s.out, 6)
	n, fmtIn = buildDir(t, b, n, s.in, 7)
	if s.out.imm != nil {
		off := s.immOff
		if off == 0 {
			off = 68
		}
		if n > off {
			t.Fatalf("immediate data at %d inside the descriptors (to %d)", off, n)
		}
		n = off + copy(b[off:], s.out.imm)
	}
	b[5] = fmtOut<<4 | fmtIn // cmd->buf_fmt
	return b[:n:n]
}

// buildDir writes one direction's descriptor at off and returns where
// it ends and its format; cnt is the offset of its descriptor count.
func buildDir(t testing.TB, b []byte, off int, d dirSpec, cnt int) (int, byte) {
	t.Helper()
	switch {
	case d.imm != nil:
		binary.BigEndian.PutUint32(b[off:], uint32(len(d.imm))) // buf->len
		return off + 4, 3
	case len(d.descs) == 0:
		return off, 0
	case len(d.descs) == 1 && !d.indirect:
		putDesc(b[off:], d.descs[0])
		return off + 16, 1
	}
	count := len(d.descs)
	if d.inIU > 0 && d.inIU < count {
		count = d.inIU
	}
	var total uint32
	for _, x := range d.descs {
		total += x.len
	}
	putDesc(b[off:], desc{d.table.va, d.table.key, uint32(16 * len(d.descs))}) // table_desc: the whole table
	binary.BigEndian.PutUint32(b[off+16:], total)                              // indirect_hdr->len
	for i := range count {
		putDesc(b[off+20+16*i:], d.descs[i])
	}
	b[cnt] = byte(count)
	return off + 20 + 16*count, 2
}

// intToSCSILUN is the kernel's int_to_scsilun: the LUN's 16-bit levels,
// the lowest first, each big-endian.
func intToSCSILUN(b []byte, lun uint64) {
	clear(b[:8])
	for i := 0; i < 8; i += 2 {
		b[i], b[i+1] = byte(lun>>8), byte(lun)
		lun >>= 16
	}
}

// descs returns n descriptors of 4 KiB pages of a fast-registered MR.
func descs(n int) []desc {
	d := make([]desc, n)
	for i := range d {
		d[i] = desc{va: 0xffff888100000000 + uint64(i)<<16, key: 0x1200 + uint32(i), len: 4096 + uint32(i)}
	}
	return d
}

// rspSpec is a target's response.
type rspSpec struct {
	reqLimDelta      uint32
	tag              uint64
	flags, status    byte
	doRes, diRes     uint32
	sense, respData  []byte
	senseLenOverride uint32
}

// buildRsp writes an SRP_RSP as srpt_build_cmd_rsp (sense data) and
// srpt_build_tskmgmt_rsp (response data) do.
func buildRsp(s rspSpec) []byte {
	b := filled(36 + len(s.respData) + len(s.sense))
	clear(b[:36]) // memset(srp_rsp, 0, sizeof(*srp_rsp))
	b[0] = 0xc1
	binary.BigEndian.PutUint32(b[4:], s.reqLimDelta)
	binary.LittleEndian.PutUint64(b[8:], s.tag)
	b[18], b[19] = s.flags, s.status
	binary.BigEndian.PutUint32(b[20:], s.doRes)
	binary.BigEndian.PutUint32(b[24:], s.diRes)
	binary.BigEndian.PutUint32(b[28:], uint32(len(s.sense)))
	if s.senseLenOverride != 0 {
		binary.BigEndian.PutUint32(b[28:], s.senseLenOverride)
	}
	binary.BigEndian.PutUint32(b[32:], uint32(len(s.respData)))
	copy(b[36:], s.respData)
	copy(b[36+len(s.respData):], s.sense)
	return b
}

// tskMgmtRsp is srpt_build_tskmgmt_rsp's answer with status code rc.
func tskMgmtRsp(tag uint64, rc byte) []byte {
	return buildRsp(rspSpec{reqLimDelta: 1, tag: tag, flags: 0x01, respData: []byte{0, 0, 0, rc}})
}

// tskMgmt is srp_send_tsk_mgmt's request.
func tskMgmt(tag, taskTag, lun uint64, fn byte) []byte {
	b := make([]byte, 48)
	b[0] = 0x01
	intToSCSILUN(b[20:], lun)
	b[30] = fn
	binary.LittleEndian.PutUint64(b[32:], taskTag)
	binary.LittleEndian.PutUint64(b[8:], tag)
	return b
}

// Port IDs as ib_srp builds them for the SRP rev. 16a I/O class:
// initiator_ext then the port GUID; id_ext then the IOC GUID.
var (
	initiatorPortID = [16]byte{0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x6b, 0x4b, 0x03, 0x00, 0x2c, 0x83, 0x21}
	targetPortID    = [16]byte{0x50, 0x6b, 0x4b, 0x03, 0x00, 0x2c, 0x90, 0x10, 0x50, 0x6b, 0x4b, 0x03, 0x00, 0x2c, 0x90, 0x10}
)

// loginReqIB is srp_send_req's IB CM private data: srp_login_req in the
// REQ's 92 bytes (the CM pads with zeros).
func loginReqIB(itIULen uint32, multich, imm bool) []byte {
	b := make([]byte, 92)
	b[0] = 0x00
	binary.BigEndian.PutUint32(b[16:], itIULen)
	binary.BigEndian.PutUint16(b[24:], 0x0002|0x0004)
	if multich {
		b[26] = 0x01
	}
	if imm {
		b[26] |= 0x80
		binary.BigEndian.PutUint16(b[28:], 68)
	}
	copy(b[32:], initiatorPortID[:])
	copy(b[48:], targetPortID[:])
	return b
}

// loginReqRDMA is srp_send_req's rdma_cm private data: the 56 bytes of
// srp_login_req_rdma (what follows the rdma_cm header).
func loginReqRDMA(itIULen uint32, multich, imm bool) []byte {
	b := make([]byte, 56)
	binary.BigEndian.PutUint16(b[8:], 0x0002|0x0004)
	if multich {
		b[10] = 0x01
	}
	b[11] = 0x00
	binary.BigEndian.PutUint32(b[12:], itIULen)
	copy(b[16:], initiatorPortID[:])
	copy(b[32:], targetPortID[:])
	if imm {
		b[10] |= 0x80
		binary.BigEndian.PutUint16(b[48:], 68)
	}
	return b
}

// loginRsp is srpt_cm_req_recv's accept: srp_login_rsp in the REP's 196
// bytes of private data.
func loginRsp(reqLim, maxIT, maxTI uint32, flags byte) []byte {
	b := make([]byte, 196)
	b[0] = 0xc0
	binary.BigEndian.PutUint32(b[4:], reqLim)
	binary.BigEndian.PutUint32(b[16:], maxIT)
	binary.BigEndian.PutUint32(b[20:], maxTI)
	binary.BigEndian.PutUint16(b[24:], 0x0002|0x0004)
	b[26] = flags
	return b
}

// loginRej is srpt_cm_req_recv's reject: srp_login_rej in the REJ's 148
// bytes of private data.
func loginRej(reason uint32) []byte {
	b := make([]byte, 148)
	b[0] = 0xc2
	binary.BigEndian.PutUint32(b[4:], reason)
	binary.BigEndian.PutUint16(b[24:], 0x0002|0x0004)
	return b
}
