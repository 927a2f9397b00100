// Package interop holds the tests that run rbridge's userspace RoCEv2
// transport (roce/transport over roce/udpconn) against the Linux kernel's
// rxe, the real peer nobody here wrote, in the qemu guest of package
// integration (make integration). It has no code of its own.
package interop
