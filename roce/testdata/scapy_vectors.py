#!/usr/bin/python3
"""Builds RoCEv2 test vectors with scapy's contrib/roce.py, an implementation
independent of rbridge: scapy lays out Ethernet, IPv4, UDP and the BTH and
computes the ICRC; the extension headers are packed here from the IBTA
layouts. Writes a pcap and, one JSON object per line, the fields each packet
was built with.

usage: scapy_vectors.py OUT.pcap OUT.jsonl
"""
import json
import struct
import sys

from scapy.all import Ether, IP, UDP, Raw, wrpcap, conf  # noqa: E402
from scapy.contrib.roce import BTH, cnp  # noqa: E402

conf.verb = 0

# opcode -> extension headers, in wire order (IBTA 9.2; rxe_opcode.c)
HDRS = {
    0x00: [], 0x01: [], 0x02: [], 0x03: ["imm"], 0x04: [], 0x05: ["imm"],
    0x06: ["reth"], 0x07: [], 0x08: [], 0x09: ["imm"], 0x0a: ["reth"],
    0x0b: ["reth", "imm"], 0x0c: ["reth"], 0x0d: ["aeth"], 0x0e: [],
    0x0f: ["aeth"], 0x10: ["aeth"], 0x11: ["aeth"], 0x12: ["aeth", "atomic_ack_eth"],
    0x13: ["atomic_eth"], 0x14: ["atomic_eth"], 0x16: ["ieth"], 0x17: ["ieth"],
    0x64: ["deth"], 0x65: ["deth", "imm"],
}
for op in range(0x00, 0x0c):
    HDRS[0x20 + op] = HDRS[op]
NO_PAYLOAD = {0x0c, 0x11, 0x12, 0x13, 0x14}


def main(pcap_path, json_path):
    pkts, recs = [], []
    for i, op in enumerate(sorted(HDRS)):
        psn = (0xfffff0 + 3 * i) & 0xffffff  # crosses the 24-bit wrap
        rec = {"opcode_num": op, "dqpn": 0x10 + i, "psn": psn, "pkey": 0xffff,
               "se": i % 2 == 1, "ackreq": i % 2 == 0}
        ext = b""
        for h in HDRS[op]:
            if h == "reth":
                rec["reth"] = {"va": 0x10000 * (i + 1) + 0x40, "rkey": 0x100 + i, "dma_len": 64 * i}
                ext += struct.pack("!QII", rec["reth"]["va"], rec["reth"]["rkey"], rec["reth"]["dma_len"])
            elif h == "aeth":
                rec["aeth"] = {"syndrome": 0x1f if op != 0x11 else 0x62, "msn": 0x1000 + i}
                ext += struct.pack("!I", rec["aeth"]["syndrome"] << 24 | rec["aeth"]["msn"])
            elif h == "atomic_ack_eth":
                rec["atomic_ack_eth"] = {"orig": 0x1122334455667700 + i}
                ext += struct.pack("!Q", rec["atomic_ack_eth"]["orig"])
            elif h == "atomic_eth":
                rec["atomic_eth"] = {"va": 0x2000 + 8 * i, "rkey": 0x200 + i,
                                     "swap_add": 0x0a0b0c0d + i, "compare": 0x01020304 + i}
                a = rec["atomic_eth"]
                ext += struct.pack("!QIQQ", a["va"], a["rkey"], a["swap_add"], a["compare"])
            elif h == "imm":
                rec["imm"] = 0xc0de0000 + i
                ext += struct.pack("!I", rec["imm"])
            elif h == "ieth":
                rec["ieth"] = {"rkey": 0x300 + i}
                ext += struct.pack("!I", rec["ieth"]["rkey"])
            elif h == "deth":
                rec["deth"] = {"qkey": 0x80010000, "sqpn": 0x20 + i}
                ext += struct.pack("!IBBH", 0x80010000, 0, (0x20 + i) >> 16, (0x20 + i) & 0xffff)
        payload = b"" if op in NO_PAYLOAD else bytes((j * 5 + i) & 0xff for j in range(i + 1))
        pad = -len(payload) & 3
        rec["payload_len"] = len(payload)
        rec["pad"] = pad
        bth = BTH(opcode=op, solicited=rec["se"], padcount=pad, dqpn=rec["dqpn"],
                  ackreq=rec["ackreq"], psn=psn)
        p = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
             IP(src="192.168.7.1", dst="192.168.7.2", id=i, flags="DF", tos=2) /
             UDP(sport=0xc000 + i, dport=4791) / bth / Raw(ext + payload + b"\0" * pad))
        pkts.append(p)
        recs.append(rec)
    # A CNP, as scapy builds it.
    p = (Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01") /
         IP(src="192.168.7.2", dst="192.168.7.1", tos=0xb8) / UDP(sport=0xc001, dport=4791) / cnp(0x42))
    pkts.append(p)
    recs.append({"opcode_num": 0x81, "dqpn": 0x42, "psn": 0, "pkey": 0xffff, "se": False, "ackreq": False,
                 "becn": True, "payload_len": 0, "pad": 0})
    for p in pkts:
        p.time = 1700000000
    wrpcap(pcap_path, pkts)
    with open(json_path, "w") as f:
        for r in recs:
            f.write(json.dumps(r, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
