package xdp

// The classifier's C source is classifier.c; `make generate` rebuilds the
// committed objects (clang, llvm-strip and libbpf's headers: `make deps`).
//go:generate go tool bpf2go -type counter -type qp -type fault -type group -type group_key classifier classifier.c -- -I/usr/include/x86_64-linux-gnu -mcpu=v3 -Wall -Werror
