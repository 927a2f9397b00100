#!/usr/bin/env bash
# Writes the crafted sysfs/procfs trees the doctor's tests run on (the
# layout and formats of Linux 6.1's sysfs; mlx5 values as on a ConnectX-6
# Dx, rxe ones as captured in the integration guest). Run from this
# directory; the trees are committed, this script is how they were made.
set -euo pipefail
cd "$(dirname "$0")"

w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
l() { mkdir -p "$(dirname "$1")"; ln -sfn "$2" "$1"; }

# gid ROOT DEV PORT INDEX GID TYPE NDEV
gid() {
	local p="$1/sys/class/infiniband/$2/ports/$3"
	w "$p/gids/$4" "$5"
	w "$p/gid_attrs/types/$4" "$6"
	w "$p/gid_attrs/ndevs/$4" "$7"
}

# port ROOT DEV PORT STATE LINK_LAYER
port() {
	local p="$1/sys/class/infiniband/$2/ports/$3"
	w "$p/state" "$4"
	w "$p/phys_state" "5: LinkUp"
	w "$p/rate" "100 Gb/sec (4X EDR)"
	w "$p/link_layer" "$5"
	# unused GID slots: zeros, attributes unreadable (EINVAL in sysfs)
	w "$p/gids/15" "0000:0000:0000:0000:0000:0000:0000:0000"
}

# counters ROOT DEV PORT: hw_counters (mlx5's names) and port counters, all 0
counters() {
	local p="$1/sys/class/infiniband/$2/ports/$3"
	for c in np_cnp_sent rp_cnp_handled out_of_sequence packet_seq_err local_ack_timeout_err implied_nak_seq_err \
		rnr_nak_retry_err np_ecn_marked_roce_packets duplicate_request; do
		w "$p/hw_counters/$c" 0
	done
	for c in port_rcv_errors port_xmit_discards symbol_error link_downed port_rcv_data port_xmit_data; do
		w "$p/counters/$c" 0
	done
}

# netdev ROOT NAME TYPE MTU
netdev() {
	w "$1/sys/class/net/$2/type" "$3"
	w "$1/sys/class/net/$2/mtu" "$4"
	w "$1/sys/class/net/$2/operstate" "up"
}

# pci ROOT NETDEV ADDR DRIVER: the netdev's device and its driver
pci() {
	mkdir -p "$1/sys/devices/pci0000:00/$3"
	l "$1/sys/devices/pci0000:00/$3/driver" "../../../bus/pci/drivers/$4"
	l "$1/sys/class/net/$2/device" "../../../devices/pci0000:00/$3"
}

# ecn ROOT NETDEV NP RP: enable/0..7, NP and RP for priority 3
ecn() {
	local p="$1/sys/class/net/$2/ecn"
	for i in 0 1 2 4 5 6 7; do w "$p/roce_np/enable/$i" 0; w "$p/roce_rp/enable/$i" 0; done
	w "$p/roce_np/enable/3" "$3"
	w "$p/roce_rp/enable/3" "$4"
	w "$p/roce_np/cnp_dscp" 48
	w "$p/roce_np/cnp_802p_prio" 6
	w "$p/roce_np/min_time_between_cnps" 4
	w "$p/roce_rp/rpg_gd" 11
	w "$p/roce_rp/dce_tcp_g" 1019
}

# sysctl ROOT IF RP_FILTER ACCEPT_LOCAL
sysctl() {
	w "$1/proc/sys/net/ipv4/conf/$2/rp_filter" "$3"
	w "$1/proc/sys/net/ipv4/conf/$2/accept_local" "$4"
}

# proc ROOT HUGEPAGES_FREE MEMLOCK(soft, "unlimited" or bytes) CAPEFF THP
proc() {
	local r="$1"
	w "$r/proc/meminfo" "MemTotal:       32768000 kB
MemFree:        30000000 kB
MemAvailable:   31000000 kB
HugePages_Total:     $2
HugePages_Free:      $2
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:        $(($2 * 2048)) kB"
	l "$r/proc/self" "4242"
	w "$r/proc/4242/limits" "$(printf '%-26s%-21s%-21s%-10s\n' 'Limit' 'Soft Limit' 'Hard Limit' 'Units' \
		'Max cpu time' unlimited unlimited seconds \
		'Max open files' 1024 524288 files \
		'Max locked memory' "$3" "$3" bytes \
		'Max address space' unlimited unlimited bytes)"
	w "$r/proc/4242/status" "Name:	rbridge
Umask:	0022
State:	R (running)
Tgid:	4242
Pid:	4242
CapInh:	0000000000000000
CapPrm:	$4
CapEff:	$4
CapBnd:	000001ffffffffff"
	w "$r/sys/kernel/mm/transparent_hugepage/enabled" "$5"
}

# clock ROOT CURRENT AVAILABLE: the kernel's clocksource
clock() {
	w "$1/sys/devices/system/clocksource/clocksource0/current_clocksource" "$2"
	w "$1/sys/devices/system/clocksource/clocksource0/available_clocksource" "$3"
}

mlx5() { # ROOT: a ConnectX NIC, mlx5_0 on eth0 (verbs leg 198.18.1.3)
	local r="$1"
	w "$r/sys/class/infiniband/mlx5_0/node_type" "1: CA"
	w "$r/sys/class/infiniband/mlx5_0/fw_ver" "22.36.1010"
	w "$r/sys/class/infiniband/mlx5_0/hca_type" "MT4125"
	mkdir -p "$r/sys/devices/pci0000:00/0000:3b:00.0"
	l "$r/sys/class/infiniband/mlx5_0/device" "../../../devices/pci0000:00/0000:3b:00.0"
	netdev "$r" eth0 1 "$2"
	pci "$r" eth0 0000:3b:00.0 mlx5_core
	port "$r" mlx5_0 1 "$3" Ethernet
	counters "$r" mlx5_0 1
	gid "$r" mlx5_0 1 0 "fe80:0000:0000:0000:0e42:a1ff:fe5b:1c2e" "IB/RoCE v1" eth0
	gid "$r" mlx5_0 1 1 "fe80:0000:0000:0000:0e42:a1ff:fe5b:1c2e" "RoCE v2" eth0
	gid "$r" mlx5_0 1 2 "0000:0000:0000:0000:0000:ffff:c612:0103" "IB/RoCE v1" eth0
	if [ "$4" = v2 ]; then
		gid "$r" mlx5_0 1 3 "0000:0000:0000:0000:0000:ffff:c612:0103" "RoCE v2" eth0
	fi
}

rm -rf good bad
# good: everything as a RoCE gateway wants it.
mlx5 good 9000 "4: ACTIVE" v2
ecn good eth0 1 1
netdev good eth1 1 9000
pci good eth1 0000:5e:00.0 ice
# eth1 has 8 receive queues (RSS), where an AF_XDP leg binds a socket each
for i in 0 1 2 3 4 5 6 7; do w "good/sys/class/net/eth1/queues/rx-$i/rps_cpus" 0; done
netdev good ib0 32 4092
w good/sys/class/net/ib0/mode datagram
netdev good lo 772 65536
sysctl good all 0 0
sysctl good eth0 2 0
sysctl good eth1 0 0
proc good 128 unlimited 0000000000000000 "always [madvise] never"
clock good tsc "tsc hpet acpi_pm "
# mlx5_2: an InfiniBand port, its GID from the subnet manager's prefix
w good/sys/class/infiniband/mlx5_2/node_type "1: CA"
port good mlx5_2 1 "4: ACTIVE" InfiniBand
gid good mlx5_2 1 0 "fe80:0000:0000:0000:0c42:a103:0065:9a10" "IB/RoCE v1" ""

# bad: each check's failure.
mlx5 bad 1000 "1: DOWN" v1
ecn bad eth0 0 1
# eth1: a ConnectX port whose RoCE is still on (mlx5_1), for a userspace leg
netdev bad eth1 1 1500
pci bad eth1 0000:5e:00.0 mlx5_core
w bad/sys/class/infiniband/mlx5_1/node_type "1: CA"
l bad/sys/class/infiniband/mlx5_1/device "../../../devices/pci0000:00/0000:5e:00.0"
# eth2: a NIC without native XDP, for a userspace leg
netdev bad eth2 1 1500
pci bad eth2 0000:06:00.0 r8169
sysctl bad eth2 0 0
port bad mlx5_1 1 "4: ACTIVE" Ethernet
gid bad mlx5_1 1 0 "fe80:0000:0000:0000:0e42:a1ff:fe5b:1c2f" "RoCE v2" eth1
netdev bad ib0 32 1500
w bad/sys/class/net/ib0/mode datagram
sysctl bad all 1 0
sysctl bad eth0 1 0
sysctl bad eth1 1 0
proc bad 0 65536 0000000000000000 "always madvise [never]"
clock bad hpet "hpet acpi_pm "
# mlx5_2: an InfiniBand port no subnet manager configured (no GID)
w bad/sys/class/infiniband/mlx5_2/node_type "1: CA"
port bad mlx5_2 1 "2: INIT" InfiniBand

# rxe-good and rxe-bad: the integration guest as captured (Linux 6.1, rxe
# on veth pairs and a bridge, siw beside them): rxe GIDs are all RoCE v2,
# index 0 the link-local one, index 1 the IPv4 address's.
rxe() { # ROOT DEV NETDEV IPHEX MAC-LOW
	local r="$1" p="$1/sys/class/infiniband/$2/ports/1"
	w "$r/sys/class/infiniband/$2/node_type" "1: CA"
	w "$r/sys/class/infiniband/$2/node_desc" "rxe"
	w "$r/sys/class/infiniband/$2/fw_ver" ""  # every device has fw_ver (the core makes it); empty without a driver hook
	w "$r/sys/class/infiniband/$2/parent" "$3"
	w "$p/state" "4: ACTIVE"
	w "$p/phys_state" "5: LinkUp"
	w "$p/rate" "10 Gb/sec (1X FDR10)"
	w "$p/link_layer" "Ethernet"
	w "$p/lid" "0x0"
	gid "$r" "$2" 1 0 "fe80:0000:0000:0000:0000:00ff:fe00:$5" "RoCE v2" "$3"
	gid "$r" "$2" 1 1 "0000:0000:0000:0000:0000:ffff:$4" "RoCE v2" "$3"
	w "$p/gids/2" "0000:0000:0000:0000:0000:0000:0000:0000"
	for c in ack_deferred completer_retry_err duplicate_request link_downed out_of_seq_request rcvd_pkts rcvd_rnr_err \
		rcvd_seq_err rdma_recvs rdma_sends retry_exceeded_err retry_rnr_exceeded_err send_err send_rnr_err sent_pkts; do
		w "$p/hw_counters/$c" 0
	done
	w "$p/hw_counters/lifespan" 12
}
guestlike() { # ROOT RP_FILTER ACCEPT_LOCAL
	local r="$1"
	rxe "$r" rxe0 veth0 c612:0101 0101
	rxe "$r" rxe1 br1 c612:0102 0102
	rxe "$r" rxe2 veth4 c612:0301 0301
	rxe "$r" rxe3 veth5 c612:0302 0302
	w "$r/sys/class/infiniband/siw0/node_type" "4: RNIC"
	w "$r/sys/class/infiniband/siw0/fw_ver" ""
	w "$r/sys/class/infiniband/siw0/ports/1/state" "4: ACTIVE"
	w "$r/sys/class/infiniband/siw0/ports/1/phys_state" "5: LinkUp"
	w "$r/sys/class/infiniband/siw0/ports/1/rate" "10 Gb/sec (1X FDR10)"
	w "$r/sys/class/infiniband/siw0/ports/1/link_layer" "Ethernet"
	w "$r/sys/class/infiniband/siw0/ports/1/gids/0" "0200:0000:0201:0000:0000:0000:0000:0000"
	for n in veth0 veth1 veth2 veth3 veth4 veth5 br1 vuser0; do
		netdev "$r" "$n" 1 1500
		sysctl "$r" "$n" "$2" "$3"
	done
	# siw0 runs on veth2: its GID is veth2's hardware address.
	w "$r/sys/class/net/veth2/address" "02:00:00:00:02:01"
	netdev "$r" lo 772 65536
	sysctl "$r" all "$2" 0
	proc "$r" 0 8388608 000001ffffffffff "[always] madvise never"
}
rm -rf rxe-good rxe-bad
guestlike rxe-good 0 1
guestlike rxe-bad 1 0
# rxe-bad: the TSC registered, but the emulated HPET chosen.
clock rxe-good tsc "tsc hpet acpi_pm "
clock rxe-bad hpet "tsc hpet acpi_pm "
