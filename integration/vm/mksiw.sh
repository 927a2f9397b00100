#!/usr/bin/env bash
# mksiw.sh KV OUT: builds siw.ko (soft-iWARP), which Debian's kernel does not
# ship, out of tree from linux-source-6.1 against linux-headers-KV, strips its
# debug info and writes it to OUT. Needs: linux-source-6.1, linux-headers-KV,
# gcc, make, xz-utils (make deps-vm installs them).
set -euo pipefail

kv=$1 out=$2
src=/usr/src/linux-source-6.1.tar.xz
build=/lib/modules/$kv/build
[ -r "$src" ] || { echo "mksiw: $src missing (apt-get install linux-source-6.1)" >&2; exit 1; }
[ -d "$build" ] || { echo "mksiw: $build missing (apt-get install linux-headers-$kv)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xJf "$src" -C "$work" linux-source-6.1/drivers/infiniband/sw/siw
dir=$work/linux-source-6.1/drivers/infiniband/sw/siw
make -s -C "$build" M="$dir" CONFIG_RDMA_SIW=m -j2 modules
strip --strip-debug "$dir/siw.ko"
install -D -m 0644 "$dir/siw.ko" "$out"
echo "mksiw: built $(basename "$out") for $kv ($(du -k "$out" | cut -f1) KiB)"
