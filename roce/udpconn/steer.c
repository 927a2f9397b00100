// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// rbridge's steering of RoCEv2 datagrams among the sockets of one
// SO_REUSEPORT group (udpconn.ListenQueues): a userspace leg's receive
// loops each read one socket and own the QPs whose numbers they gave out.
//
//   UDP header (8) / BTH: opcode, flags, P_Key (4) | reserved, DestQP (4) ...
//
// The kernel runs it on every datagram to the group's address, with the
// context's data at the UDP header (struct sk_reuseport_md). It selects
// the socket at index QueueOf(DestQP, queues) of "sockets", as roce.QueueOf
// computes it:
// - DestQP 0 and 1 (the special QPs: the CM's MADs) and 0xFFFFFF
//   (multicast): socket 0;
// - any other: DestQP % queues;
// - a datagram too short for a BTH (12 bytes): socket 0, counted SHORT.
// A selection the kernel refuses (no socket at the index) is counted
// FAILED and leaves the choice to the kernel's hash of the 4-tuple.

//go:build ignore

#include <linux/bpf.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_QUEUES 256 // roce.MaxQueues

enum counter {
	COUNTER_STEERED = 0,
	COUNTER_SHORT = 1,
	COUNTER_FAILED = 2,
	COUNTER_MAX = 3,
};

// Puts enum counter into the BTF, for bpf2go's Go constants.
const enum counter *counter_type __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u64);
} sockets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

// queues is how many sockets the group has, set before the program loads.
volatile const __u32 queues = 1;

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

SEC("sk_reuseport")
int steer(struct sk_reuseport_md *ctx)
{
	__u32 key = 0;
	__u32 word;

	// DestQP: the low 24 bits of the BTH's second word, 8 + 4 bytes in;
	// the UDP header and a whole BTH (12 bytes) must be there.
	if (ctx->len >= 8 + 12 && bpf_skb_load_bytes(ctx, 8 + 4, &word, sizeof(word)) == 0) {
		__u32 qpn = bpf_ntohl(word) & 0xffffff;
		__u32 n = queues;
		if (n > 1 && qpn > 1 && qpn != 0xffffff)
			key = qpn % n;
	} else {
		count(COUNTER_SHORT);
	}
	if (bpf_sk_select_reuseport(ctx, &sockets, &key, 0) == 0)
		count(COUNTER_STEERED);
	else
		count(COUNTER_FAILED);
	return SK_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
