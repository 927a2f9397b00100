// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// rbridge's XDP classifier for RoCEv2 on the gateway's Ethernet NIC.
//
//   Ethernet [802.1Q/802.1ad x2] / IPv4 | IPv6 / UDP dport 4791 / BTH ...
//
// - not IPv4/IPv6 UDP to 4791 (and IPv4 fragments, IPv6 extension headers):
//   XDP_PASS, counted NOT_ROCE.
// - RoCEv2 that is truncated (or whose UDP length disagrees with the IP
//   length), has BTH TVer != 0 or a reserved opcode: XDP_DROP, counted.
// - fault injection (map "faults", off by default): XDP_DROP every Nth and/or
//   a fraction of the well-formed RoCEv2 packets.
// - destination QP 0xFFFFFF (a multicast datagram, IBA 10.5.2.1): looked up by
//   the IP destination in "groups" (an IPv4 group as its RoCEv2 MGID
//   ::ffff:a.b.c.d, as the kernel's rxe_rcv_mcast_pkt keys it); a group
//   there is counted per group (per CPU) and redirected as an owned QP's
//   packets are, never answered with a CNP (DCQCN is per connection); any
//   other goes to the kernel, counted UNJOINED.
// - a destination QP that is not in "qps": XDP_PASS (the kernel's RDMA stack,
//   if any, owns it).
// - a QP in "qps": counted per QP (per CPU), then redirected to the AF_XDP
//   socket of the receiving queue ("xsks"), or passed when there is none.
// - ECN-CE on a QP in "qps": the packet is turned into a CNP for the sender
//   (addresses swapped, ICRC computed here) and sent back with XDP_TX, at most
//   once per QP per cnp_interval_ns. The marked packet itself is consumed:
//   XDP cannot emit a second frame, so the transport recovers it as a loss.
//   Other CE-marked packets of the interval are redirected as usual.

//go:build ignore

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCE_PORT 4791
#define BTH_LEN 12
#define ICRC_LEN 4
#define CNP_OPCODE 0x81
#define CNP_RESERVED 16
#define CNP_TRANSPORT (BTH_LEN + CNP_RESERVED + ICRC_LEN)
#define BECN 0x40
#define OP_RESERVED 0xff
#define MULTICAST_QPN 0xffffff

// Settings fixed at load time (the Go loader rewrites them).
volatile const __u64 cnp_interval_ns = 50000;
volatile const __u8 cnp_enabled = 0;
volatile const __u8 cnp_dscp = 48;

// Global counters, one slot per reason (a per-CPU array).
enum counter {
	COUNTER_NOT_ROCE,      // passed: not RoCEv2 (not IP/UDP to 4791)
	COUNTER_UNOWNED,       // passed: RoCEv2 for a QP not in qps
	COUNTER_NO_SOCKET,     // passed: owned QP, no AF_XDP socket on the queue
	COUNTER_REDIRECT,      // redirected to AF_XDP
	COUNTER_DROP_TRUNCATED,// dropped: shorter than its headers, or bad lengths
	COUNTER_DROP_VERSION,  // dropped: BTH TVer != 0
	COUNTER_DROP_OPCODE,   // dropped: reserved opcode
	COUNTER_DROP_FAULT,    // dropped by fault injection
	COUNTER_CNP_SENT,      // CNPs sent with XDP_TX
	COUNTER_CNP_LIMITED,   // ECN-CE within the interval: no CNP
	COUNTER_CNP_FAILED,    // a CNP was due but could not be built
	COUNTER_UNJOINED,      // passed: to QPN 0xFFFFFF, for a group not in groups
	COUNTER_MAX,
};

// Puts enum counter into the BTF, for bpf2go's Go constants.
const enum counter *counter_type __attribute__((unused));

// A QP rbridge owns: what Go set, and the classifier's counters. The map is
// per CPU (one lookup per packet, no shared cache lines); Go writes the
// same remote_qpn into every CPU's copy.
struct qp {
	__u32 remote_qpn; // the peer's QP: a CNP's destination (UD: DETH SrcQP)
	__u32 flags;      // reserved, 0
	__u64 packets;
	__u64 bytes;      // Ethernet frame bytes
	__u64 ecn_ce;
	__u64 cnps;
};

// A multicast group rbridge joined, by its MGID: the IPv6 group itself, or
// an IPv4 group mapped (::ffff:a.b.c.d).
struct group_key {
	__u8 mgid[16];
};

// A joined group's counters (per CPU, like struct qp's).
struct group {
	__u64 packets;
	__u64 bytes;  // Ethernet frame bytes
	__u64 ecn_ce;
};

// Fault injection: drop every Nth well-formed RoCEv2 packet (every_nth > 0)
// and, independently, each with probability threshold / 2^32.
struct fault {
	__u32 every_nth;
	__u32 pad;
	__u64 threshold;
	__u64 seen; // RoCEv2 packets seen since the setting was written
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, __u32);
	__type(value, struct qp);
	__uint(max_entries, 65536);
} qps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct group_key);
	__type(value, struct group);
	__uint(max_entries, 1024);
} groups SEC(".maps");

// A filter in front of qps: bit qpn & 0xffff (word (qpn >> 6) & 1023, bit
// qpn & 63) is set while an owned QP's number has those low 16 bits (Go
// counts the QPs per bit). A RoCEv2 packet for a QP rbridge does not own
// mostly stops at this inlined array read, before the hash lookup.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1024);
} qp_filter SEC(".maps");

// The time of the last CNP sent per QP (bpf_ktime_get_ns).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 65536);
} cnp_last SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 256); /* MaxQueues */
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, COUNTER_MAX);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct fault);
	__uint(max_entries, 1);
} faults SEC(".maps");

// Bytes of extension headers after the BTH per opcode; OP_RESERVED for the
// opcodes rbridge does not accept (RD, reserved). Mirrors roce.Opcode's
// HeaderLen and Valid; TestOpcodeTable checks every entry against them.
static const __u8 ext_len[256] = {
	// RC 0x00-0x17
	[0x00] = 0, [0x01] = 0, [0x02] = 0, [0x03] = 4, [0x04] = 0, [0x05] = 4,
	[0x06] = 16, [0x07] = 0, [0x08] = 0, [0x09] = 4, [0x0a] = 16, [0x0b] = 20,
	[0x0c] = 16, [0x0d] = 4, [0x0e] = 0, [0x0f] = 4, [0x10] = 4, [0x11] = 4,
	[0x12] = 12, [0x13] = 28, [0x14] = 28, [0x15] = OP_RESERVED, [0x16] = 4, [0x17] = 4,
	[0x18 ... 0x1f] = OP_RESERVED,
	// UC 0x20-0x2b
	[0x20] = 0, [0x21] = 0, [0x22] = 0, [0x23] = 4, [0x24] = 0, [0x25] = 4,
	[0x26] = 16, [0x27] = 0, [0x28] = 0, [0x29] = 4, [0x2a] = 16, [0x2b] = 20,
	[0x2c ... 0x63] = OP_RESERVED,
	// UD
	[0x64] = 8, [0x65] = 12,
	[0x66 ... 0x80] = OP_RESERVED,
	[0x81] = 16, // CNP
	[0x82 ... 0xff] = OP_RESERVED,
};

// The IEEE CRC-32 table (reflected polynomial 0xedb88320).
static const __u32 crc_table[256] = {
	0x00000000, 0x77073096, 0xee0e612c, 0x990951ba, 0x076dc419, 0x706af48f,
	0xe963a535, 0x9e6495a3, 0x0edb8832, 0x79dcb8a4, 0xe0d5e91e, 0x97d2d988,
	0x09b64c2b, 0x7eb17cbd, 0xe7b82d07, 0x90bf1d91, 0x1db71064, 0x6ab020f2,
	0xf3b97148, 0x84be41de, 0x1adad47d, 0x6ddde4eb, 0xf4d4b551, 0x83d385c7,
	0x136c9856, 0x646ba8c0, 0xfd62f97a, 0x8a65c9ec, 0x14015c4f, 0x63066cd9,
	0xfa0f3d63, 0x8d080df5, 0x3b6e20c8, 0x4c69105e, 0xd56041e4, 0xa2677172,
	0x3c03e4d1, 0x4b04d447, 0xd20d85fd, 0xa50ab56b, 0x35b5a8fa, 0x42b2986c,
	0xdbbbc9d6, 0xacbcf940, 0x32d86ce3, 0x45df5c75, 0xdcd60dcf, 0xabd13d59,
	0x26d930ac, 0x51de003a, 0xc8d75180, 0xbfd06116, 0x21b4f4b5, 0x56b3c423,
	0xcfba9599, 0xb8bda50f, 0x2802b89e, 0x5f058808, 0xc60cd9b2, 0xb10be924,
	0x2f6f7c87, 0x58684c11, 0xc1611dab, 0xb6662d3d, 0x76dc4190, 0x01db7106,
	0x98d220bc, 0xefd5102a, 0x71b18589, 0x06b6b51f, 0x9fbfe4a5, 0xe8b8d433,
	0x7807c9a2, 0x0f00f934, 0x9609a88e, 0xe10e9818, 0x7f6a0dbb, 0x086d3d2d,
	0x91646c97, 0xe6635c01, 0x6b6b51f4, 0x1c6c6162, 0x856530d8, 0xf262004e,
	0x6c0695ed, 0x1b01a57b, 0x8208f4c1, 0xf50fc457, 0x65b0d9c6, 0x12b7e950,
	0x8bbeb8ea, 0xfcb9887c, 0x62dd1ddf, 0x15da2d49, 0x8cd37cf3, 0xfbd44c65,
	0x4db26158, 0x3ab551ce, 0xa3bc0074, 0xd4bb30e2, 0x4adfa541, 0x3dd895d7,
	0xa4d1c46d, 0xd3d6f4fb, 0x4369e96a, 0x346ed9fc, 0xad678846, 0xda60b8d0,
	0x44042d73, 0x33031de5, 0xaa0a4c5f, 0xdd0d7cc9, 0x5005713c, 0x270241aa,
	0xbe0b1010, 0xc90c2086, 0x5768b525, 0x206f85b3, 0xb966d409, 0xce61e49f,
	0x5edef90e, 0x29d9c998, 0xb0d09822, 0xc7d7a8b4, 0x59b33d17, 0x2eb40d81,
	0xb7bd5c3b, 0xc0ba6cad, 0xedb88320, 0x9abfb3b6, 0x03b6e20c, 0x74b1d29a,
	0xead54739, 0x9dd277af, 0x04db2615, 0x73dc1683, 0xe3630b12, 0x94643b84,
	0x0d6d6a3e, 0x7a6a5aa8, 0xe40ecf0b, 0x9309ff9d, 0x0a00ae27, 0x7d079eb1,
	0xf00f9344, 0x8708a3d2, 0x1e01f268, 0x6906c2fe, 0xf762575d, 0x806567cb,
	0x196c3671, 0x6e6b06e7, 0xfed41b76, 0x89d32be0, 0x10da7a5a, 0x67dd4acc,
	0xf9b9df6f, 0x8ebeeff9, 0x17b7be43, 0x60b08ed5, 0xd6d6a3e8, 0xa1d1937e,
	0x38d8c2c4, 0x4fdff252, 0xd1bb67f1, 0xa6bc5767, 0x3fb506dd, 0x48b2364b,
	0xd80d2bda, 0xaf0a1b4c, 0x36034af6, 0x41047a60, 0xdf60efc3, 0xa867df55,
	0x316e8eef, 0x4669be79, 0xcb61b38c, 0xbc66831a, 0x256fd2a0, 0x5268e236,
	0xcc0c7795, 0xbb0b4703, 0x220216b9, 0x5505262f, 0xc5ba3bbe, 0xb2bd0b28,
	0x2bb45a92, 0x5cb36a04, 0xc2d7ffa7, 0xb5d0cf31, 0x2cd99e8b, 0x5bdeae1d,
	0x9b64c2b0, 0xec63f226, 0x756aa39c, 0x026d930a, 0x9c0906a9, 0xeb0e363f,
	0x72076785, 0x05005713, 0x95bf4a82, 0xe2b87a14, 0x7bb12bae, 0x0cb61b38,
	0x92d28e9b, 0xe5d5be0d, 0x7cdcefb7, 0x0bdbdf21, 0x86d3d2d4, 0xf1d4e242,
	0x68ddb3f8, 0x1fda836e, 0x81be16cd, 0xf6b9265b, 0x6fb077e1, 0x18b74777,
	0x88085ae6, 0xff0f6a70, 0x66063bca, 0x11010b5c, 0x8f659eff, 0xf862ae69,
	0x616bffd3, 0x166ccf45, 0xa00ae278, 0xd70dd2ee, 0x4e048354, 0x3903b3c2,
	0xa7672661, 0xd06016f7, 0x4969474d, 0x3e6e77db, 0xaed16a4a, 0xd9d65adc,
	0x40df0b66, 0x37d83bf0, 0xa9bcae53, 0xdebb9ec5, 0x47b2cf7f, 0x30b5ffe9,
	0xbdbdf21c, 0xcabac28a, 0x53b39330, 0x24b4a3a6, 0xbad03605, 0xcdd70693,
	0x54de5729, 0x23d967bf, 0xb3667a2e, 0xc4614ab8, 0x5d681b02, 0x2a6f2b94,
	0xb40bbe37, 0xc30c8ea1, 0x5a05df1b, 0x2d02ef8d,
};

struct vlan {
	__be16 tci;
	__be16 proto;
};

struct bth {
	__u8 opcode;
	__u8 flags; // SE, M, pad count, TVer
	__be16 pkey;
	__u8 fb;    // FECN, BECN, reserved
	__u8 qpn[3];
	__u8 ack;
	__u8 psn[3];
};

static __always_inline int count(__u32 c, int action)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
	return action;
}

static __always_inline __u32 crc_byte(__u32 crc, __u8 b)
{
	__u32 i = crc ^ b;
	// Keep the mask next to the index in the program: the compiler would
	// otherwise fold it into the xor's operands, and verifiers before
	// Linux 6.4 lose an xor's bounds, then refuse the table access
	// ("math between map_value pointer and register with unbounded min
	// value"; seen on Debian 12's 6.1).
	asm volatile("" : "+r"(i));
	return crc_table[i & 0xff] ^ (crc >> 8);
}

// icrc returns the RoCEv2 invariant CRC of the n bytes at p (IP header to the
// end of the CNP's reserved bytes), with the variant fields masked to ones.
// n and the masked offsets are constants once inlined, so the loop unrolls
// to straight-line loads.
static __always_inline __u32 icrc(const __u8 *p, const int v6)
{
	const int iplen = v6 ? 40 : 20;
	const int n = iplen + 8 + BTH_LEN + CNP_RESERVED;
	// The CRC state after the 8 bytes of 0xFF that stand for the LRH.
	__u32 crc = 0xdebb20e3;
#pragma unroll
	for (int i = 0; i < n; i++) {
		__u8 b = p[i];
		if (v6) {
			if (i == 0)
				b |= 0x0f; // traffic class (low nibble of byte 0)
			else if (i <= 3 || i == 7)
				b = 0xff;  // traffic class, flow label; hop limit
		} else if (i == 1 || i == 8 || i == 10 || i == 11) {
			b = 0xff; // TOS; TTL; header checksum
		}
		if (i == iplen + 6 || i == iplen + 7 || i == iplen + 8 + 4)
			b = 0xff; // UDP checksum; BTH FECN/BECN/reserved
		crc = crc_byte(crc, b);
	}
	return ~crc;
}

static __always_inline __u16 ipv4_csum(const __u16 *w)
{
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

// cnp_due reports whether a CNP may go to qpn now, and claims the slot.
static __always_inline int cnp_due(__u32 qpn)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *last = bpf_map_lookup_elem(&cnp_last, &qpn);
	if (!last)
		return bpf_map_update_elem(&cnp_last, &qpn, &now, BPF_NOEXIST) == 0;
	__u64 prev = *last;
	if (prev != 0 && now - prev < cnp_interval_ns)
		return 0;
	// Another CPU may be claiming the same slot: one of us wins.
	return __sync_val_compare_and_swap(last, prev, now) == prev;
}

// send_cnp rewrites the packet in place into a CNP to the sender and returns
// XDP_TX; it returns -1, with the packet untouched, if it cannot, and
// XDP_DROP if the packet was resized but could not be rewritten (the
// verifier's bounds checks, which cannot fail after a resize).
// l3 is the offset of the IP header, l4 of the UDP header.
static __always_inline int send_cnp(struct xdp_md *ctx, __u32 l3, __u32 l4, int v6, __u32 dest_qp)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if (l3 > 22 || l4 > 22 + 60)
		return -1;
	struct udphdr *udp = data + l4;
	if ((void *)(udp + 1) > end)
		return -1;
	__be16 sport = udp->source;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return -1;

	const __u32 iplen = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 want = l3 + iplen + sizeof(struct udphdr) + CNP_TRANSPORT;
	int delta = (int)want - (int)(end - data);
	if (delta != 0 && bpf_xdp_adjust_tail(ctx, delta))
		return -1;

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__u8 mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	__u8 *ip = data + l3;
	if ((void *)(ip + (v6 ? 40 : 20) + 8 + CNP_TRANSPORT) > end)
		return XDP_DROP;
	if (v6) {
		struct ipv6hdr *h = (void *)ip;
		struct in6_addr a = h->saddr;
		h->saddr = h->daddr;
		h->daddr = a;
		*(__be32 *)h = bpf_htonl(0x60000000 | (__u32)(cnp_dscp << 2) << 20);
		h->payload_len = bpf_htons(sizeof(struct udphdr) + CNP_TRANSPORT);
		h->nexthdr = IPPROTO_UDP;
		h->hop_limit = 64;
	} else {
		struct iphdr *h = (void *)ip;
		__be32 a = h->saddr;
		h->saddr = h->daddr;
		h->daddr = a;
		ip[0] = 0x45;
		h->tos = cnp_dscp << 2;
		h->tot_len = bpf_htons(sizeof(struct iphdr) + sizeof(struct udphdr) + CNP_TRANSPORT);
		h->id = 0;
		h->frag_off = bpf_htons(0x4000); // DF
		h->ttl = 64;
		h->protocol = IPPROTO_UDP;
		h->check = 0;
		h->check = ipv4_csum((void *)h);
	}

	udp = (void *)(ip + (v6 ? 40 : 20));
	udp->source = sport;
	udp->dest = bpf_htons(ROCE_PORT);
	udp->len = bpf_htons(sizeof(struct udphdr) + CNP_TRANSPORT);
	udp->check = 0;

	struct bth *b = (void *)(udp + 1);
	b->opcode = CNP_OPCODE;
	b->flags = 0;
	b->pkey = 0xffff;
	b->fb = BECN;
	b->qpn[0] = dest_qp >> 16;
	b->qpn[1] = dest_qp >> 8;
	b->qpn[2] = dest_qp;
	b->ack = 0;
	b->psn[0] = 0;
	b->psn[1] = 0;
	b->psn[2] = 0;
	__u8 *r = (void *)(b + 1);
	__builtin_memset(r, 0, CNP_RESERVED);

	// The ICRC reads the whole CNP: bound it again in each branch, so the
	// verifier sees the range on the path it walks whatever the compiler
	// merged above.
	__u32 crc;
	if (v6) {
		if ((void *)(ip + 40 + 8 + CNP_TRANSPORT) > end)
			return XDP_DROP;
		crc = icrc(ip, 1);
	} else {
		if ((void *)(ip + 20 + 8 + CNP_TRANSPORT) > end)
			return XDP_DROP;
		crc = icrc(ip, 0);
	}
	__u8 *t = r + CNP_RESERVED;
	t[0] = crc;
	t[1] = crc >> 8;
	t[2] = crc >> 16;
	t[3] = crc >> 24;
	return XDP_TX;
}

SEC("xdp")
int rbridge_classify(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(COUNTER_NOT_ROCE, XDP_PASS);
	__be16 proto = eth->h_proto;
	__u32 l3 = sizeof(*eth);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan *v = data + l3;
		if ((void *)(v + 1) > end)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		proto = v->proto;
		l3 += sizeof(*v);
	}

	// IP: find the UDP header, the ECN field and the IP payload length.
	int v6;
	__u8 ecn;
	__u32 l4, iplen;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + l3;
		if ((void *)(ip + 1) > end)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		if (ip->protocol != IPPROTO_UDP || ip->ihl < 5 ||
		    (ip->frag_off & bpf_htons(0x3fff)) != 0)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		v6 = 0;
		ecn = ip->tos & 3;
		l4 = l3 + ip->ihl * 4;
		iplen = bpf_ntohs(ip->tot_len);
		if (iplen < ip->ihl * 4)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		iplen -= ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip = data + l3;
		if ((void *)(ip + 1) > end)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		if (ip->nexthdr != IPPROTO_UDP)
			return count(COUNTER_NOT_ROCE, XDP_PASS);
		v6 = 1;
		ecn = (ip->flow_lbl[0] >> 4) & 3; // low bits of the traffic class
		l4 = l3 + sizeof(*ip);
		iplen = bpf_ntohs(ip->payload_len);
	} else {
		return count(COUNTER_NOT_ROCE, XDP_PASS);
	}
	if (l4 > 22 + 60)
		return count(COUNTER_NOT_ROCE, XDP_PASS);
	struct udphdr *udp = data + l4;
	if ((void *)(udp + 1) > end)
		return count(COUNTER_NOT_ROCE, XDP_PASS);
	if (udp->dest != bpf_htons(ROCE_PORT))
		return count(COUNTER_NOT_ROCE, XDP_PASS);

	// RoCEv2 from here on: malformed packets are dropped.
	struct bth *bth = (void *)(udp + 1);
	if ((void *)(bth + 1) > end)
		return count(COUNTER_DROP_TRUNCATED, XDP_DROP);
	if (bth->flags & 0x0f)
		return count(COUNTER_DROP_VERSION, XDP_DROP);
	__u8 op = bth->opcode;
	__u32 ext = ext_len[op];
	if (ext == OP_RESERVED)
		return count(COUNTER_DROP_OPCODE, XDP_DROP);
	__u32 ulen = bpf_ntohs(udp->len);
	if (ulen < sizeof(*udp) + BTH_LEN + ext + ICRC_LEN || ulen != iplen ||
	    l4 + ulen > (__u32)(end - data))
		return count(COUNTER_DROP_TRUNCATED, XDP_DROP);
	__u32 qpn = (__u32)bth->qpn[0] << 16 | (__u32)bth->qpn[1] << 8 | bth->qpn[2];
	__u32 dest_qp = 0;
	if ((op & 0xe0) == 0x60) {
		// UD: the sender's QP is in the DETH (Q_Key, reserved, SrcQP).
		__u8 *deth = (void *)(bth + 1);
		if ((void *)(deth + 8) > end)
			return count(COUNTER_DROP_TRUNCATED, XDP_DROP);
		dest_qp = (__u32)deth[5] << 16 | (__u32)deth[6] << 8 | deth[7];
	}

	struct fault *f = bpf_map_lookup_elem(&faults, &zero);
	if (f && (f->every_nth || f->threshold)) {
		__u64 seen = __sync_fetch_and_add(&f->seen, 1) + 1;
		if (f->every_nth && seen % f->every_nth == 0)
			return count(COUNTER_DROP_FAULT, XDP_DROP);
		if (f->threshold && (__u64)bpf_get_prandom_u32() < f->threshold)
			return count(COUNTER_DROP_FAULT, XDP_DROP);
	}

	if (qpn == MULTICAST_QPN) {
		// The group is the IP destination (the RoCEv2 GRH's DGID).
		struct group_key key = {};
		if (v6) {
			struct ipv6hdr *ip = data + l3;
			if ((void *)(ip + 1) > end)
				return count(COUNTER_DROP_TRUNCATED, XDP_DROP);
			// ff00::/8 only: ::ffff:a.b.c.d, an IPv4 group's MGID, is
			// no IPv6 group.
			if (ip->daddr.in6_u.u6_addr8[0] != 0xff)
				return count(COUNTER_UNJOINED, XDP_PASS);
			__builtin_memcpy(key.mgid, &ip->daddr, 16);
		} else {
			struct iphdr *ip = data + l3;
			if ((void *)(ip + 1) > end)
				return count(COUNTER_DROP_TRUNCATED, XDP_DROP);
			key.mgid[10] = 0xff;
			key.mgid[11] = 0xff;
			__builtin_memcpy(&key.mgid[12], &ip->daddr, 4);
		}
		struct group *g = bpf_map_lookup_elem(&groups, &key);
		if (!g)
			return count(COUNTER_UNJOINED, XDP_PASS);
		g->packets++;
		g->bytes += end - data;
		if (ecn == 3)
			g->ecn_ce++;
		int act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
		return count(act == XDP_REDIRECT ? COUNTER_REDIRECT : COUNTER_NO_SOCKET, act);
	}

	__u32 word = (qpn >> 6) & 1023;
	__u64 *bits = bpf_map_lookup_elem(&qp_filter, &word);
	if (!bits || !(*bits & (1ULL << (qpn & 63))))
		return count(COUNTER_UNOWNED, XDP_PASS);
	struct qp *st = bpf_map_lookup_elem(&qps, &qpn);
	if (!st)
		return count(COUNTER_UNOWNED, XDP_PASS);
	if ((op & 0xe0) != 0x60)
		dest_qp = st->remote_qpn;
	st->packets++;
	st->bytes += end - data;
	if (ecn == 3)
		st->ecn_ce++;

	if (ecn == 3 && cnp_enabled && op != CNP_OPCODE) {
		if (!cnp_due(qpn)) {
			count(COUNTER_CNP_LIMITED, 0);
		} else {
			int act = send_cnp(ctx, l3, l4, v6, dest_qp);
			if (act == XDP_TX) {
				st->cnps++;
				return count(COUNTER_CNP_SENT, XDP_TX);
			}
			count(COUNTER_CNP_FAILED, 0);
			if (act == XDP_DROP)
				return XDP_DROP;
		}
	}

	// Without a socket on the queue the redirect falls back to XDP_PASS.
	int act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	return count(act == XDP_REDIRECT ? COUNTER_REDIRECT : COUNTER_NO_SOCKET, act);
}

// A program that passes everything: the baseline the classifier's cost is
// measured against.
SEC("xdp")
int rbridge_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char __license[] SEC("license") = "Dual BSD/GPL";
