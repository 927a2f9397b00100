#!/usr/bin/env bash
# Prints the version (uname -r style, e.g. 6.1.0-57-amd64) of the kernel that
# Debian's linux-image-amd64 metapackage installed: the kernel the integration
# guest boots. Fails, saying why, when the metapackage or its kernel is missing.
set -euo pipefail

dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) || {
	echo "vm-kernel: linux-image-amd64 is not installed (run: make deps-vm)" >&2
	exit 1
}
# Depends looks like "linux-image-6.1.0-57-amd64 (= 6.1.192-3)".
kv=$(sed -n 's/.*linux-image-\([0-9][^ ,]*\).*/\1/p' <<<"$dep" | head -1)
if [ -z "$kv" ] || [ ! -e "/boot/vmlinuz-$kv" ]; then
	echo "vm-kernel: cannot find the kernel of linux-image-amd64 (Depends: $dep)" >&2
	exit 1
fi
echo "$kv"
