#!/usr/bin/env bash
# Writes the crafted sysfs trees the package's tests run on, in the layout
# and formats of Linux 6.1's sysfs and drivers/infiniband/ulp/ipoib
# (mode_show "datagram\n"/"connected\n", pkey_show "0x%04x\n", umcast_show
# "%d\n", dev_id_show "%#x\n", parent_show "%s\n"; children have no device
# link, ipoib_parent_init being the only SET_NETDEV_DEV). The netlink side
# of each tree (links, addresses, neighbours) is built in the tests. Run
# from this directory; the trees are committed, this script is how they
# were made.
set -euo pipefail
cd "$(dirname "$0")"

w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" > "$1"; }
l() { mkdir -p "$(dirname "$1")"; ln -sfn "$2" "$1"; }

# hca ROOT PCI DEV: an RDMA device under a PCI function, and its class link
hca() {
	mkdir -p "$1/sys/devices/pci0000:00/$2/infiniband/$3"
	w "$1/sys/devices/pci0000:00/$2/infiniband/$3/node_type" "1: CA"
	l "$1/sys/class/infiniband/$3" "../../devices/pci0000:00/$2/infiniband/$3"
}

# port ROOT PCI DEV PORT GID0: a port with its GID at index 0
port() {
	local p="$1/sys/devices/pci0000:00/$2/infiniband/$3/ports/$4"
	w "$p/link_layer" "InfiniBand"
	w "$p/state" "4: ACTIVE"
	w "$p/gids/0" "$5"
}

# ipoib ROOT NAME MODE PKEY UMCAST MTU: an IPoIB netdev's own files
ipoib() {
	local d="$1/sys/class/net/$2"
	w "$d/type" 32
	w "$d/mode" "$3"
	w "$d/pkey" "$4"
	w "$d/umcast" "$5"
	w "$d/mtu" "$6"
}

# parent ROOT NAME PCI DEV_PORT DEV_ID: a port's own interface's device link and port
parent() {
	l "$1/sys/class/net/$2/device" "../../../devices/pci0000:00/$3"
	w "$1/sys/class/net/$2/dev_port" "$4"
	w "$1/sys/class/net/$2/dev_id" "$5"
}

rm -rf mlx5 mlx4 odd

# mlx5: a ConnectX-6 (enhanced IPoIB: datagram only, no RC flag in the
# address), port 1 at 4K, and a P_Key child ib0.8001.
hca mlx5 0000:3b:00.0 mlx5_0
port mlx5 0000:3b:00.0 mlx5_0 1 fe80:0000:0000:0000:b8ce:f603:0012:3456
ipoib mlx5 ib0 datagram 0xffff 0 4092
parent mlx5 ib0 0000:3b:00.0 0 0x0
ipoib mlx5 ib0.8001 datagram 0x8001 0 4092
w mlx5/sys/class/net/ib0.8001/parent ib0

# mlx4: a dual-port ConnectX-3 as Red Hat's documentation shows it (port
# GUIDs f452:1403:007b:e1b1 and ...e1b2): ib0 on port 1 in connected mode,
# ib1 on port 2 in datagram mode with umcast set, its port named the old
# way (dev_port 0, dev_id 0x1).
hca mlx4 0000:04:00.0 mlx4_0
port mlx4 0000:04:00.0 mlx4_0 1 fe80:0000:0000:0000:f452:1403:007b:e1b1
port mlx4 0000:04:00.0 mlx4_0 2 fe80:0000:0000:0000:f452:1403:007b:e1b2
ipoib mlx4 ib0 connected 0xffff 0 65520
parent mlx4 ib0 0000:04:00.0 0 0x0
ipoib mlx4 ib1 datagram 0xffff 1 2044
parent mlx4 ib1 0000:04:00.0 0 0x1

# odd: what does not add up. ib0 has no device link (its port is found by
# GID); ib1's port has another GID at index 0 than its address carries;
# ib2 has no ipoib files at all (an ARPHRD_INFINIBAND netdev of another
# driver); ib3.8002's parent is not there.
hca odd 0000:5e:00.0 mlx5_3
port odd 0000:5e:00.0 mlx5_3 1 fe80:0000:0000:0000:0002:c903:000a:1e5a
hca odd 0000:af:00.0 mlx5_4
port odd 0000:af:00.0 mlx5_4 1 fe80:0000:0000:0000:0002:c903:000a:ffff
ipoib odd ib0 datagram 0xffff 0 2044
ipoib odd ib1 datagram 0x7fff 0 2044
parent odd ib1 0000:af:00.0 0 0x0
w odd/sys/class/net/ib2/type 32
ipoib odd ib3.8002 datagram 0x8002 0 2044
w odd/sys/class/net/ib3.8002/parent ib3
