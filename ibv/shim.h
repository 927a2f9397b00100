// Shared by the cgo preambles of package ibv: plain structs that Go fills or
// reads in C memory, so one cgo call carries a whole batch.
#ifndef RBRIDGE_IBV_SHIM_H
#define RBRIDGE_IBV_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>

// struct rb_wc is WorkCompletion's layout (checked in consts_linux.go).
struct rb_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t sl;
	uint8_t dlid_path_bits;
	uint8_t pad[2];
};

// A send work request as Go fills it: flat, no unions. sge_off indexes the
// QP's SGE array.
struct rb_send_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	struct ibv_ah *ah;
	uint32_t rkey;
	uint32_t imm;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t sge_off;
	uint32_t num_sge;
	uint32_t opcode;
	uint32_t send_flags;
	// IBV_WR_BIND_MW: the window, its new rkey (bind_rkey) and the bind
	// info (ibv_mw_bind_info).
	struct ibv_mw *mw;
	struct ibv_mr *bind_mr;
	uint64_t bind_addr;
	uint64_t bind_length;
	uint32_t bind_rkey;
	uint32_t bind_access;
};

struct rb_recv_wr {
	uint64_t wr_id;
	uint32_t sge_off;
	uint32_t num_sge;
};

#endif
