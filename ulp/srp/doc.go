// Package srp is the wire format of the SCSI RDMA Protocol (T10 SRP and
// SRP-2 as the Linux kernel implements them: include/scsi/srp.h, the
// initiator drivers/infiniband/ulp/srp/ib_srp.c, the target
// drivers/infiniband/ulp/srpt/ib_srpt.c), as typed views for a gateway
// that parses the messages passing through it and rewrites the
// initiator's memory descriptors in place to name its own staging
// memory.
//
// An SRP connection (an RDMA channel) is one RC queue pair. It opens
// with a login in the CM handshake: SRP_LOGIN_REQ in the REQ's private
// data (LoginReq over the IB CM, LoginReqRDMA over RDMA/CM), answered by
// SRP_LOGIN_RSP in the REP's (LoginRsp) or SRP_LOGIN_REJ in a REJ's
// (LoginRej). The login fixes the largest IU each side sends, the
// descriptor formats, and whether commands carry immediate data and at
// which offset (ImmDataOffset). Then every message is an information
// unit (IU), one SEND, its opcode in the first byte and its tag at bytes
// 8-15:
//
//	initiator -> target: SRP_CMD (Cmd), SRP_TSK_MGMT (TskMgmt),
//	                     SRP_I_LOGOUT (ILogout),
//	                     SRP_CRED_RSP (CredRsp), SRP_AER_RSP (AerRsp)
//	target -> initiator: SRP_RSP (Rsp) to a command or a task management
//	                     function, SRP_T_LOGOUT (TLogout),
//	                     SRP_CRED_REQ (CredReq), SRP_AER_REQ (AerReq)
//
// Each SRP_RSP, SRP_CRED_REQ and SRP_AER_REQ returns credit
// (req_lim_delta): the initiator sends a request only while it holds
// credit. A response or an answer to a target's request carries the tag
// of the request it answers.
//
// A command names its data by memory descriptors (Desc: address, R_Key,
// length) in the initiator's memory; the target moves the data with
// one-sided operations before it sends the SRP_RSP: it RDMA READs a
// write's data-out buffer and RDMA WRITEs a read's data-in buffer. A
// direction's descriptor is direct (one Desc), indirect (a table of
// Descs, carried in the command, whose own descriptor names the table in
// the initiator's memory), or, for data-out, immediate: the data itself
// follows in the SEND.
//
// CheckIU checks a message's opcode and fixed length; ParseCmd checks a
// command whole and returns its descriptors as views whose setters
// rewrite them in place, without allocating:
//
//	off := srp.ImmDataOffset(loginReq.Fields(), loginRsp) // once per connection
//	op, err := srp.CheckIU(msg)
//	if err != nil { /* not SRP */ }
//	if op == srp.OpCmd {
//		c, _, err := srp.ParseCmd(msg, off)
//		if err != nil { /* fail the command */ }
//		for _, d := range c.DataIn().All() {
//			d.Set(stagingAddr, stagingRKey)
//		}
//		if t := c.DataIn().Table(); t != nil {
//			t.Set(stagingTableAddr, stagingRKey)
//		}
//	}
//
// # Invalidation and external descriptor tables
//
// Neither Linux end uses Send with Invalidate. The initiator posts
// every IU as IB_WR_SEND (srp_post_send) and, once a command's response
// arrives, invalidates its fast-registered keys itself with
// IB_WR_LOCAL_INV (srp_unmap_data, srp_inv_rkey); it does not look for a
// remote invalidation (srp_recv_done reads no work completion flags).
// The target posts its responses as IB_WR_SEND (srpt_queue_response)
// and asks nothing of the CM private data about invalidation. A gateway
// has no key to invalidate for an SRP peer and must not send one.
//
// The Linux initiator makes a target read an external descriptor table
// (RDMA READ from the table descriptor) only when a command needs more
// descriptors than its cmd_sg_entries and allow_ext_sg is set (off by
// default): srp_map_data then puts the first cmd_sg_entries descriptors
// in the command and names the whole table. Otherwise it fails the
// command ("Could not fit S/G list into SRP_CMD"). The Linux target
// never reads a table from the initiator: srpt_get_desc_tbl refuses an
// indirect descriptor whose table holds more descriptors than the
// command carries, and srpt_handle_cmd answers it with BUSY
// (target_send_busy). DataBuf.TableInIU tells the two apart.
//
// Files: opcode.go (Opcode, fixed lengths, CheckIU, tags), desc.go (Desc,
// Format, DataBuf), cmd.go (Cmd, ParseCmd), rsp.go (Rsp), tskmgmt.go
// (TskMgmt), logout.go (ILogout, TLogout), credit.go (CredReq, CredRsp),
// aer.go (AerReq, AerRsp), login.go (LoginReq, LoginReqRDMA, LoginRsp,
// LoginRej, ImmDataOffset), errors.go.
//
// Views are byte slices (Cmd a struct of them) with getters and, where a
// gateway changes a field, setters; they never copy. Parsers return
// (view, n, err), never panic on short or malformed input, and do not
// allocate unless they fail. Multi-byte fields are big-endian, but for
// the tags, which are opaque (TagTaskMgmt).
package srp
