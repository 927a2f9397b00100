# rbridge build, test and tooling entry points. `make help` lists them.

GO      ?= go
PKGS    ?= ./...
BENCH   ?= .
BENCHTIME ?= 1s

# Debian packages the tests need, by purpose. `make deps` installs the missing ones.
DEBS_ORACLES := python3-scapy tshark
DEBS_CGO     := gcc libibverbs-dev librdmacm-dev
DEBS_BPF     := clang llvm libbpf-dev
DEBS         := $(DEBS_ORACLES) $(DEBS_CGO) $(DEBS_BPF)
# The integration guest: qemu, Debian's kernel, the RDMA userland copied into its
# initramfs, and what builds siw.ko (Debian's kernel ships no siw). `make deps-vm`
# adds linux-headers-<version> for the kernel that linux-image-amd64 installed.
DEBS_VM      := qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-providers \
                ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils perftest iproute2 kmod \
                cpio linux-source-6.1 xz-utils gcc make

.PHONY: help deps deps-vm build test unit bench generate check-generate fmt vet

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

deps: ## install the Debian packages the tests need (only the missing ones)
	@bash scripts/deps.sh $(DEBS)

deps-vm: ## install what the integration guest needs (only the missing packages)
	@bash scripts/deps.sh $(DEBS_VM)
	@kv=$$(bash scripts/vm-kernel.sh) && bash scripts/deps.sh linux-headers-$$kv

build: ## build bin/rbridge
	$(GO) build -o bin/rbridge ./cmd/rbridge

test: deps vet unit ## the whole suite: install what it needs, vet, unit and root tests

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

unit: ## go test over every package (root tests run when root)
	$(GO) test -count=1 $(PKGS)

bench: ## benchmarks, with allocations
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

generate: ## regenerate generated code (bpf2go)
	$(GO) generate $(PKGS)

check-generate: generate ## fail when committed generated code differs from a fresh generation
	git diff --exit-code
