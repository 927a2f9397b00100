// Package harness is the host side of rbridge's integration guest: it
// builds and caches the guest image, selects and cross-builds the test
// binaries, packs them into an initramfs overlay, boots qemu, reads the guest
// console and turns it into per-package, per-device results and the
// direct-path baseline. integration/cmd/vmrun drives it; integration/vm holds
// the guest's scripts.
//
// The console protocol (lines starting with "@@RB ") is written by
// integration/vm/init.sh and parsed by [Console].
package harness
