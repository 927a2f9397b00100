#!/usr/bin/env bash
# mkimage.sh KV SIW_KO INIT OUT: builds the guest's base initramfs OUT (a gzip'd
# newc cpio) for kernel KV: busybox, the kernel modules for rxe, siw (SIW_KO,
# built by mksiw.sh), veth and bridges, iproute2, kmod, the RDMA userland
# (rdma-core providers, perftest, rping) with every shared library they load,
# and INIT as /init. It also writes OUT.files, the list of files in the image,
# so the runner adds only the libraries the test binaries need beyond these.
set -euo pipefail

kv=$1 siw=$2 init=$3 out=$4
mods=/lib/modules/$kv
multiarch=/usr/lib/x86_64-linux-gnu

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

# copy FILE...: copies each file into the image at the same path, keeping
# symlinks as symlinks and copying their targets too.
copy() {
	local f
	for f in "$@"; do
		while :; do
			[ -e "$root$f" ] || [ -L "$root$f" ] && break
			mkdir -p "$root$(dirname "$f")"
			cp -a "$f" "$root$f"
			[ -L "$f" ] || break
			local t
			t=$(readlink "$f")
			case $t in /*) f=$t ;; *) f=$(dirname "$f")/$t ;; esac
		done
	done
}

# copy_elf FILE...: copies executables or libraries and the libraries ldd says they load.
copy_elf() {
	local f lib
	for f in "$@"; do
		copy "$f"
		for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
			copy "$lib"
		done
	done
}

mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,run,root,var,mnt,usr/bin,usr/sbin,usr/lib}
# Debian is merged-/usr: /lib and /lib64 are symlinks into /usr.
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64" 2>/dev/null || true
mkdir -p "$root/usr/lib64"

# busybox provides the shell and the small tools; iproute2's ip and kmod's
# modprobe are called by full path in init because busybox's applets shadow them.
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
	case $applet in ip|modprobe|insmod|rmmod|lsmod|depmod|modinfo) continue ;; esac
	[ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

copy_elf /usr/sbin/ip /usr/sbin/tc /usr/bin/rdma /usr/sbin/modprobe \
	/usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/mckey \
	/usr/bin/ib_send_bw /usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_send_lat \
	/usr/bin/ib_write_lat /usr/bin/ib_read_lat /usr/bin/ib_atomic_bw /usr/bin/ib_atomic_lat
for tool in insmod rmmod lsmod depmod modinfo; do ln -sf modprobe "$root/usr/sbin/$tool"; done
# The verbs providers are loaded with dlopen, so ldd of the tools misses them.
copy_elf "$multiarch"/libibverbs/librxe-rdmav34.so "$multiarch"/libibverbs/libsiw-rdmav34.so
copy /etc/libibverbs.d/rxe.driver /etc/libibverbs.d/siw.driver
# nfsd's userland for an NFSv4 export (no rpcbind: v4 needs none); libtirpc
# reads /etc/netconfig.
copy_elf /usr/sbin/rpc.mountd /usr/sbin/exportfs
copy /etc/netconfig
mkdir -p "$root/var/lib/nfs"
# open-iscsi's userland for the kernel's iSER initiator (ib_iser): iscsid
# and iscsiadm, and the default iscsid.conf iscsiadm reads node defaults from.
copy_elf /usr/sbin/iscsid /usr/sbin/iscsiadm
copy /etc/iscsi/iscsid.conf
mkdir -p "$root/etc/iscsi/nodes" "$root/etc/iscsi/send_targets" "$root/etc/iscsi/ifaces" "$root/var/lib/iscsi" "$root/run/lock/iscsi"
# rping's threads need libgcc_s at pthread_exit; nothing links it directly.
copy_elf "$multiarch"/libgcc_s.so.1
copy /etc/protocols /etc/services

# Kernel modules: rxe and its dependencies, the rdma_cm user interface, veth and
# bridges, netem (tests inject loss with tc), the NVMe-oF host and target
# with a ramdisk (brd) for their namespace, nfsd, the NFSv4 client and
# RPC-over-RDMA (rpcrdma), the LIO iSCSI target with iSER (ib_isert) and
# the iSER initiator with SCSI disks (ib_iser, sd_mod), LIO's SRP target
# (ib_srpt) and the kernel's SRP initiator (ib_srp), siw's dependencies,
# and the crc modules, which are soft dependencies.
want=(rdma_rxe rdma_ucm ib_uverbs ib_umad veth bridge sch_netem libcrc32c
	brd nvmet nvmet-rdma nvme-rdma nfsd rpcrdma nfsv4
	target_core_mod iscsi_target_mod ib_isert ib_iser sd_mod ib_srpt ib_srp
	crc32_generic crc32-pclmul crc32c_generic crc32c-intel crct10dif_generic crct10dif-pclmul)
for dep in $(modinfo -F depends "$siw" | tr ',' ' '); do want+=("$dep"); done
modprobe -S "$kv" -a --show-depends "${want[@]}" |
	awk '$1 == "insmod" { print $2 }' | sort -u | while read -r ko; do
		copy "$ko"
	done
install -D -m 0644 "$siw" "$root$mods/extra/siw.ko"
cp "$mods"/modules.order "$mods"/modules.builtin "$mods"/modules.builtin.modinfo "$root$mods/"
depmod -b "$root" "$kv"

install -m 0755 "$init" "$root/init"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
echo "$kv" >"$root/etc/rbridge-kernel"

(cd "$root" && find . -mindepth 1 | sed 's|^\./|/|' | sort) >"$out.files"
(cd "$root" && find . -mindepth 1 | sed 's|^\./||' | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
	gzip -1 >"$out"
echo "mkimage: $(basename "$out") for $kv: $(wc -l <"$out.files") files, $(du -k "$out" | cut -f1) KiB"
