package nvme_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// Vectors written byte by byte from the kernel's struct layouts
// (include/linux/nvme.h, nvme-rdma.h) and from what the Linux host and
// target and SPDK put in them, not from this package's encoders.

// linuxRead4K is the command capsule a Linux host sends for a 4 KiB read
// of LBA 16 (512-byte blocks) through a fast-registered MR: struct
// nvme_rw_command as nvme_setup_rw (drivers/nvme/host/core.c) fills it,
// the data pointer as nvme_rdma_map_sg_fr (drivers/nvme/host/rdma.c) does.
var linuxRead4K = []byte{
	0x02,       // opcode: nvme_cmd_read
	0x40,       // flags: NVME_CMD_SGL_METABUF, set by nvme_rdma_map_data
	0x03, 0x10, // command_id 0x1003: nvme_cid, genctr 1 << 12 | tag 3
	0x01, 0x00, 0x00, 0x00, // nsid 1
	0, 0, 0, 0, 0, 0, 0, 0, // cdw2, cdw3
	0, 0, 0, 0, 0, 0, 0, 0, // metadata
	// dptr.ksgl, struct nvme_keyed_sgl_desc:
	0x00, 0x60, 0x45, 0x23, 0x01, 0x00, 0x00, 0x00, // addr = cpu_to_le64(mr->iova), 0x123456000
	0x00, 0x10, 0x00, // length: put_unaligned_le24(mr->length = 4096)
	0xcd, 0xab, 0x34, 0x12, // key: put_unaligned_le32(mr->rkey = 0x1234abcd)
	0x4f,                      // type: NVME_KEY_SGL_FMT_DATA_DESC << 4 | NVME_SGL_FMT_INVALIDATE
	0x10, 0, 0, 0, 0, 0, 0, 0, // slba 16
	0x07, 0x00, // length: 8 blocks, 0's based
	0x00, 0x00, // control
	0, 0, 0, 0, // dsmgmt
	0, 0, 0, 0, // reftag
	0, 0, 0, 0, // lbat, lbatm
}

// linuxKeepAlive is a Linux host's Keep Alive: no data, so
// nvme_rdma_set_sg_null writes a keyed descriptor of all zeros.
var linuxKeepAlive = []byte{
	0x18, 0x40, 0x1f, 0x00, // opcode nvme_admin_keep_alive, flags, command_id 31
	0, 0, 0, 0, // nsid
	0, 0, 0, 0, 0, 0, 0, 0, // cdw2, cdw3
	0, 0, 0, 0, 0, 0, 0, 0, // metadata
	0, 0, 0, 0, 0, 0, 0, 0, // addr 0
	0, 0, 0, // length 0
	0, 0, 0, 0, // key 0
	0x40,                   // NVME_KEY_SGL_FMT_DATA_DESC << 4
	0, 0, 0, 0, 0, 0, 0, 0, // cdw10, cdw11
	0, 0, 0, 0, 0, 0, 0, 0, // cdw12, cdw13
	0, 0, 0, 0, 0, 0, 0, 0, // cdw14, cdw15
}

// linuxIOConnectSQE is the SQE of the Connect a Linux host sends for I/O
// queue 1 of a controller with 128-entry queues, its Connect data in the
// capsule: struct nvmf_connect_command as nvmf_connect_cmd_prep
// (drivers/nvme/host/fabrics.c) fills it, the data pointer as
// nvme_rdma_map_sg_inline writes it.
var linuxIOConnectSQE = []byte{
	0x7f,       // opcode: nvme_fabrics_command
	0x40,       // resv1, where nvme_rdma_map_data sets NVME_CMD_SGL_METABUF
	0x00, 0x10, // command_id
	0x01,                         // fctype: nvme_fabrics_type_connect
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // resv2[19]
	0, 0, 0, 0, 0, 0, 0, 0, 0,
	// dptr.sgl, struct nvme_sgl_desc:
	0, 0, 0, 0, 0, 0, 0, 0, // addr = cpu_to_le64(ctrl->icdoff), 0
	0x00, 0x04, 0x00, 0x00, // length = cpu_to_le32(1024)
	0, 0, 0, // rsvd
	0x01,       // type: NVME_SGL_FMT_DATA_DESC << 4 | NVME_SGL_FMT_OFFSET
	0x00, 0x00, // recfmt 0
	0x01, 0x00, // qid 1
	0x7f, 0x00, // sqsize = ctrl->sqsize, 127
	0x00,       // cattr
	0x00,       // resv3
	0, 0, 0, 0, // kato: 0 for an I/O queue
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // resv4[12]
}

var (
	testHostID  = [16]byte{0x8b, 0x1c, 0x2e, 0x46, 0x0a, 0x1f, 0x4d, 0x2b, 0x9e, 0x5c, 0x61, 0x0f, 0x33, 0x7a, 0x90, 0x01}
	testSubNQN  = "nqn.2026-12.io.rbridge:test"
	testHostNQN = "nqn.2014-08.org.nvmexpress:uuid:8b1c2e46-0a1f-4d2b-9e5c-610f337a9001"
)

// linuxConnectData is struct nvmf_connect_data as nvmf_connect_data_prep
// fills it for an I/O queue of controller 1, placed field by field.
func linuxConnectData() []byte {
	d := make([]byte, 1024)      // kzalloc
	copy(d[0:16], testHostID[:]) // uuid_t hostid
	d[16], d[17] = 0x01, 0x00    // __le16 cntlid: the admin Connect's result
	// char resv4[238]
	copy(d[256:512], testSubNQN)  // char subsysnqn[NVMF_NQN_FIELD_LEN], strscpy
	copy(d[512:768], testHostNQN) // char hostnqn[NVMF_NQN_FIELD_LEN]
	// char resv5[256]
	return d
}

// spdkKeyedList is the capsule SPDK's host sends for a read into two
// scattered buffers (lib/nvme/nvme_rdma.c, nvme_rdma_build_sgl_request):
// a last-segment data pointer with offset 0 naming the two keyed
// descriptors it places right after the SQE.
var spdkKeyedList = []byte{
	0x02, 0x40, 0x07, 0x00, // read, psdt SPDK_NVME_PSDT_SGL_MPTR_CONTIG, cid 7
	0x01, 0x00, 0x00, 0x00, // nsid 1
	0, 0, 0, 0, 0, 0, 0, 0, // cdw2, cdw3
	0, 0, 0, 0, 0, 0, 0, 0, // mptr
	0, 0, 0, 0, 0, 0, 0, 0, // sgl1.address = 0
	0x20, 0x00, 0x00, 0x00, // sgl1.unkeyed.length = 2 * 16
	0, 0, 0, // reserved
	0x31,                         // SPDK_NVME_SGL_TYPE_LAST_SEGMENT, SPDK_NVME_SGL_SUBTYPE_OFFSET
	0x00, 0x01, 0, 0, 0, 0, 0, 0, // cdw10, cdw11: slba 256
	0x0f, 0x00, 0, 0, 0, 0, 0, 0, // cdw12: 16 blocks, 0's based; cdw13
	0, 0, 0, 0, 0, 0, 0, 0, // cdw14, cdw15
	// sgl[0]: keyed, address
	0x00, 0x10, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x08, 0x00, 0x11, 0x11, 0x00, 0x00, 0x40,
	// sgl[1]: keyed, address
	0x00, 0x80, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x18, 0x00, 0x22, 0x22, 0x00, 0x00, 0x40,
}

func TestVectorLinuxRead(t *testing.T) {
	c, err := nvme.ParseCapsule(linuxRead4K)
	if err != nil {
		t.Fatal(err)
	}
	cmd := c.Command()
	if cmd.Opcode() != nvme.OpRead || cmd.Direction() != nvme.DirControllerToHost || cmd.CommandID() != 0x1003 ||
		cmd.NSID() != 1 || cmd.PSDT() != nvme.PSDTSGLBuffer || cmd.DWord(10) != 16 || cmd.DWord(12)&0xffff != 7 {
		t.Errorf("command fields %+v", cmd.Fields())
	}
	if c.Kind() != nvme.DataKeyed || c.Keyed().Len() != 1 {
		t.Fatalf("kind %v with %d keyed descriptors", c.Kind(), c.Keyed().Len())
	}
	want := keyed(0x123456000, 4096, 0x1234abcd, nvme.SGLInvalidate)
	if diff := cmp.Diff(want, c.Keyed().At(0).Fields()); diff != "" {
		t.Errorf("keyed descriptor (-want +got):\n%s", diff)
	}
	if !c.Keyed().At(0).Invalidate() || c.Keyed().TotalLength() != 4096 {
		t.Errorf("Invalidate %v TotalLength %d", c.Keyed().At(0).Invalidate(), c.Keyed().TotalLength())
	}
	// Encoding the same fields gives the same bytes.
	f := cmd.Fields()
	out := filled(nvme.CommandLen)
	nvme.Command(out).Encode(&f)
	if !bytes.Equal(out, linuxRead4K) {
		t.Errorf("re-encoded\n%x\nwant\n%x", out, linuxRead4K)
	}
}

func TestVectorLinuxKeepAlive(t *testing.T) {
	c, err := nvme.ParseCapsule(linuxKeepAlive)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind() != nvme.DataKeyed || c.Keyed().Len() != 1 || c.Keyed().At(0).Length() != 0 ||
		c.Command().Direction() != nvme.DirNone {
		t.Errorf("keep alive: kind %v, %d descriptors, direction %v", c.Kind(), c.Keyed().Len(), c.Command().Direction())
	}
}

func TestVectorLinuxIOConnect(t *testing.T) {
	b := append(bytes.Clone(linuxIOConnectSQE), linuxConnectData()...)
	c, err := nvme.ParseCapsule(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind() != nvme.DataInCapsule || len(c.InCapsuleData()) != nvme.ConnectDataLen || c.Keyed().Len() != 0 {
		t.Fatalf("kind %v, %d in-capsule bytes", c.Kind(), len(c.InCapsuleData()))
	}
	con, n, err := nvme.ParseConnect(c.Command())
	if err != nil || n != nvme.CommandLen {
		t.Fatalf("ParseConnect: %d, %v", n, err)
	}
	wantCon := nvme.ConnectFields{Flags: 0x40, CommandID: 0x1000, QID: 1, SQSize: 127,
		DPTR: nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: 1024}}
	if diff := cmp.Diff(wantCon, con.Fields()); diff != "" {
		t.Errorf("connect (-want +got):\n%s", diff)
	}
	d, _, err := nvme.ParseConnectData(c.InCapsuleData())
	if err != nil {
		t.Fatal(err)
	}
	wantData := nvme.ConnectDataFields{HostID: testHostID, CNTLID: 1, SubNQN: testSubNQN, HostNQN: testHostNQN}
	if diff := cmp.Diff(wantData, d.Fields()); diff != "" {
		t.Errorf("connect data (-want +got):\n%s", diff)
	}
	// And the encoders write the same bytes.
	out := filled(nvme.CommandLen + nvme.ConnectDataLen)
	nvme.Connect(out).Encode(&wantCon)
	if err := nvme.ConnectData(out[nvme.CommandLen:]).Encode(&wantData); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b, out); diff != "" {
		t.Errorf("encoded capsule (-kernel +ours):\n%s", diff)
	}
}

// TestVectorLinuxAdminConnect is the admin queue's Connect: never in
// capsule (the Linux host inlines only on I/O queues), SQSIZE
// NVME_AQ_DEPTH-1, KATO the default 5 s in milliseconds.
func TestVectorLinuxAdminConnect(t *testing.T) {
	b := bytes.Clone(linuxIOConnectSQE)
	copy(b[24:40], []byte{0x00, 0x20, 0x45, 0x23, 0x01, 0, 0, 0, 0x00, 0x04, 0x00, 0x78, 0x56, 0x34, 0x12, 0x4f})
	b[42], b[44] = 0x00, 0x1f // qid 0, sqsize 31
	b[48], b[49] = 0x88, 0x13 // kato 5000
	c, err := nvme.ParseCapsule(b)
	if err != nil {
		t.Fatal(err)
	}
	con := nvme.Connect(c.Command())
	if c.Kind() != nvme.DataKeyed || con.QID() != 0 || con.SQSize() != 31 || con.KATO() != 5000 {
		t.Errorf("admin connect: kind %v %+v", c.Kind(), con.Fields())
	}
	if diff := cmp.Diff(keyed(0x123452000, 1024, 0x12345678, nvme.SGLInvalidate), c.Keyed().At(0).Fields()); diff != "" {
		t.Errorf("connect data pointer (-want +got):\n%s", diff)
	}
}

func TestVectorSPDKKeyedList(t *testing.T) {
	c, err := nvme.ParseCapsule(spdkKeyedList)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind() != nvme.DataKeyedList || c.Keyed().Len() != 2 {
		t.Fatalf("kind %v with %d descriptors", c.Kind(), c.Keyed().Len())
	}
	want := []nvme.SGLFields{
		keyed(0x7f0000001000, 2048, 0x1111, nvme.SGLAddress),
		keyed(0x7f0000008000, 6144, 0x2222, nvme.SGLAddress),
	}
	var got []nvme.SGLFields
	for _, d := range c.Keyed().All() {
		got = append(got, d.Fields())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keyed list (-want +got):\n%s", diff)
	}
	if c.Keyed().TotalLength() != 8192 || c.Command().DWord(12)&0xffff != 15 {
		t.Errorf("total length %d for 16 blocks", c.Keyed().TotalLength())
	}
}

// TestVectorLinuxCompletions are response capsules as the Linux target
// sends them: struct nvme_completion, status << 1 with the phase clear
// (drivers/nvme/target/core.c, nvmet_set_result and __nvmet_req_complete).
func TestVectorLinuxCompletions(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want nvme.CompletionFields
	}{
		{"read done", []byte{
			0, 0, 0, 0, 0, 0, 0, 0, // result
			0x05, 0x00, // sq_head 5
			0x01, 0x00, // sq_id 1
			0x03, 0x10, // command_id 0x1003
			0x00, 0x00, // status
		}, nvme.CompletionFields{SQHead: 5, SQID: 1, CommandID: 0x1003}},
		{"admin connect done", []byte{
			0x01, 0x00, 0, 0, 0, 0, 0, 0, // result.u16: the controller ID, 1
			0x01, 0x00, 0x00, 0x00, // sq_head 1, sq_id 0
			0x00, 0x10, 0x00, 0x00, // command_id, status
		}, nvme.CompletionFields{DW0: 1, SQHead: 1, CommandID: 0x1000}},
		{"connect invalid host", []byte{
			0, 0, 0, 0, 0, 0, 0, 0,
			0, 0, 0, 0,
			0x00, 0x10,
			0x08, 0x83, // (NVME_SC_CONNECT_INVALID_HOST | NVME_STATUS_DNR) << 1
		}, nvme.CompletionFields{CommandID: 0x1000, Status: nvme.StatusConnectInvalidHost | nvme.StatusDNR}},
	} {
		c, _, err := nvme.ParseCompletion(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, c.Fields()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		out := filled(nvme.CompletionLen)
		nvme.Completion(out).Encode(&tc.want)
		if !bytes.Equal(out, tc.b) {
			t.Errorf("%s: encoded %x, want %x", tc.name, out, tc.b)
		}
	}
}

// TestVectorLinuxCMRequest is the private data nvme_rdma_route_resolved
// (drivers/nvme/host/rdma.c) hands rdma_connect.
func TestVectorLinuxCMRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want nvme.CMRequestFields
	}{
		{"admin queue", append([]byte{0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x1f, 0x00}, make([]byte, 24)...),
			nvme.CMRequestFields{HRQSize: 32, HSQSize: 31}}, // NVME_AQ_DEPTH, NVME_AQ_DEPTH - 1
		{"I/O queue 1", append([]byte{0x00, 0x00, 0x01, 0x00, 0x80, 0x00, 0x7f, 0x00}, make([]byte, 24)...),
			nvme.CMRequestFields{QID: 1, HRQSize: 128, HSQSize: 127}}, // queue_size, sqsize
	} {
		r, _, err := nvme.ParseCMRequest(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, r.Fields()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
		if got := nvme.AppendCMRequest(nil, &tc.want); !bytes.Equal(got, tc.b) {
			t.Errorf("%s: encoded %x, want %x", tc.name, got, tc.b)
		}
	}
}
