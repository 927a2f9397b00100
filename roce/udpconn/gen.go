package udpconn

// The reuseport program's C source is steer.c; `make generate` rebuilds the
// committed objects (clang, llvm-strip and libbpf's headers: `make deps`).
//go:generate go tool bpf2go -type counter steer steer.c -- -I/usr/include/x86_64-linux-gnu -mcpu=v3 -Wall -Werror
