# rbridge build, test and tooling entry points. `make help` lists them.

GO      ?= go
PKGS    ?= ./...
BENCH   ?= .
BENCHTIME ?= 1s

# Debian packages, by purpose. `make deps-build` installs what building needs (cgo
# over libibverbs and librdmacm); `make deps` adds what the tests and code generation
# need: the oracles (scapy, tshark), promtool (prometheus: lints a /metrics scrape),
# clang for the XDP program, systemd for the unit's check, keepalived for the
# failover test of deploy/keepalived (TestKeepalivedFailover).
DEBS_ORACLES := python3-scapy tshark prometheus
DEBS_CGO     := gcc libibverbs-dev librdmacm-dev
DEBS_BPF     := clang llvm libbpf-dev
DEBS_UNIT    := systemd
DEBS_FAILOVER := keepalived
DEBS_BUILD   := $(DEBS_CGO)
DEBS         := $(DEBS_ORACLES) $(DEBS_CGO) $(DEBS_BPF) $(DEBS_UNIT) $(DEBS_FAILOVER)
# The integration guest: qemu, Debian's kernel, the RDMA userland copied into its
# initramfs, and what builds siw.ko (Debian's kernel ships no siw). `make deps-vm`
# adds linux-headers-<version> for the kernel that linux-image-amd64 installed.
# prometheus: the runner lints the guest's live /metrics scrapes with its promtool,
# on the host (the guest image has none). nfs-kernel-server: the guest's NFS
# server userland (rpc.mountd, exportfs), copied into its image. open-iscsi: the
# guest's iSER initiator userland (iscsid, iscsiadm), copied into its image.
DEBS_VM      := qemu-system-x86 linux-image-amd64 busybox-static rdma-core ibverbs-providers \
                ibverbs-utils libibverbs-dev librdmacm-dev rdmacm-utils perftest iproute2 kmod \
                cpio linux-source-6.1 xz-utils gcc make prometheus nfs-kernel-server open-iscsi

.PHONY: help deps deps-build deps-vm integration soak baseline-docs build install test test-host unit race nocgo bench generate check-generate fmt vet

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

deps-build: ## install the Debian packages building needs (gcc, libibverbs-dev, librdmacm-dev; only the missing ones)
	@bash scripts/deps.sh $(DEBS_BUILD)

deps: ## install the Debian packages building, the tests and generation need (only the missing ones)
	@bash scripts/deps.sh $(DEBS)

deps-vm: ## install what the integration guest needs (only the missing packages)
	@bash scripts/deps.sh $(DEBS_VM)
	@kv=$$(bash scripts/vm-kernel.sh) && bash scripts/deps.sh linux-headers-$$kv

# `rbridge version` and `rbridge --version` print what build stamps in; `make build
# VERSION=v1.2.3` overrides git's (an environment variable does not).
BIN     ?= bin/rbridge
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

build: ## build bin/rbridge (BIN=), stamped with git describe and the commit
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rbridge

# `make install` (root): the binary, the systemd unit with its paths filled in,
# and the example config as rbridge.yaml.example only: its interfaces and
# addresses are placeholders, so the unit would refuse it (ExecStartPre's
# --check) and restart until systemd gave up. Copy it to rbridge.yaml and
# edit it first. PREFIX, BINDIR, UNITDIR, SYSCONFDIR and DESTDIR as usual.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
# Shell completion, where bash-completion, zsh and fish look.
COMPLETIONDIR ?= $(PREFIX)/share
DESTDIR    ?=

install: build ## install bin/rbridge, dist/rbridge.service, dist/rbridge.yaml as an example, and shell completion (PREFIX=, DESTDIR=, ...)
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/rbridge
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/rbridge
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' dist/rbridge.service > $(DESTDIR)$(UNITDIR)/rbridge.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/rbridge.service
	install -m 0644 dist/rbridge.yaml $(DESTDIR)$(SYSCONFDIR)/rbridge/rbridge.yaml.example
	install -d $(DESTDIR)$(COMPLETIONDIR)/bash-completion/completions $(DESTDIR)$(COMPLETIONDIR)/zsh/vendor-completions $(DESTDIR)$(COMPLETIONDIR)/fish/vendor_completions.d
	$(BIN) completion bash > $(DESTDIR)$(COMPLETIONDIR)/bash-completion/completions/rbridge
	$(BIN) completion zsh > $(DESTDIR)$(COMPLETIONDIR)/zsh/vendor-completions/_rbridge
	$(BIN) completion fish > $(DESTDIR)$(COMPLETIONDIR)/fish/vendor_completions.d/rbridge.fish
	@test -e $(DESTDIR)$(SYSCONFDIR)/rbridge/rbridge.yaml || { \
	  echo "next: cp $(SYSCONFDIR)/rbridge/rbridge.yaml.example $(SYSCONFDIR)/rbridge/rbridge.yaml, edit its legs (interfaces, addresses) and routes,"; \
	  echo "      rbridge run --config $(SYSCONFDIR)/rbridge/rbridge.yaml --check, then systemctl enable --now rbridge"; }

test: test-host integration ## the whole suite: install what it needs, vet, generated code, unit, no-cgo, root and guest tests

test-host: deps vet check-generate unit race nocgo ## the whole suite but the qemu guest (make integration)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)

# make deps installed scapy and tshark: their oracle tests must run, not skip.
# Root tests (XDP, AF_XDP, network namespaces) fail instead of skipping: CI runs as root;
# `make unit REQUIRE_ROOT=0` lets them skip elsewhere.
REQUIRE_ROOT ?= 1
unit: ## go test over every package (root tests must run: REQUIRE_ROOT=0 to let them skip)
	RBRIDGE_REQUIRE_ORACLES=1 RBRIDGE_REQUIRE_ROOT=$(REQUIRE_ROOT) bash scripts/gotest.sh unit $(GO) test -count=1 $(PKGS)

# The race detector over the packages whose goroutines share memory: the relay,
# the legs, the transport, the tunnel (about 3 minutes on two cores).
RACE_PKGS ?= ./bridge/... ./roce/... ./tunnel/... ./ulp/...
race: ## go test -race over the packages that run goroutines
	RBRIDGE_REQUIRE_ROOT=$(REQUIRE_ROOT) bash scripts/gotest.sh race $(GO) test -race -count=1 $(RACE_PKGS)

# The README's first command builds without cgo: everything must build so, and the
# packages whose code changes without it (ibv's stub and what imports ibv) are
# tested so too.
NOCGO_PKGS ?= ./ibv/... ./cmd/rbridge/... ./roce/cm/... ./roce/interop/...
nocgo: ## build everything and test the packages that use ibv with CGO_ENABLED=0
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=0 RBRIDGE_REQUIRE_ORACLES=1 RBRIDGE_REQUIRE_ROOT=$(REQUIRE_ROOT) bash scripts/gotest.sh nocgo $(GO) test -count=1 $(NOCGO_PKGS)

# `make integration`: tests in a qemu guest with the kernel's rxe and siw (integration/README.md).
# RUN=regexp runs matching tests only; PKG=./ibv runs those packages only; BASELINE=false skips
# the perftest/rping baseline; VM_TIMEOUT bounds the guest's whole run.
RUN        ?=
GUEST_BENCH ?=
GUEST_BENCHTIME ?= 1s
GUEST_COUNT ?= 1
PKG        ?=
BASELINE   ?= true
VM_TIMEOUT ?= 45m
VMRUN       = $(GO) run ./integration/cmd/vmrun -timeout $(VM_TIMEOUT)

integration: deps-vm ## tests in the qemu guest with rxe and siw, then the baseline (RUN=, PKG=, GUEST_BENCH=, GUEST_BENCHTIME=, GUEST_COUNT=)
	$(VMRUN) -pkg '$(PKG)' -run '$(RUN)' -bench '$(GUEST_BENCH)' -benchtime '$(GUEST_BENCHTIME)' -count $(GUEST_COUNT) -baseline=$(BASELINE)

# The soak (not in CI): rbridge run in the guest under churn, traffic and 1%
# loss for DURATION, its resources sampled at rest every SOAK_SAMPLE; its
# figures are in .cache/vm/run/artifacts/gateway.rxe0/soak.md afterwards.
DURATION    ?= 10m
SOAK_SAMPLE ?= 30s
SOAK_TIMEOUT ?= 60m
soak: deps-vm ## the soak in the guest (DURATION=10m, SOAK_SAMPLE=30s, SOAK_TIMEOUT=60m): fails when a resource grows or a workload fails
	$(VMRUN) -pkg ./integration/gateway -run '^TestGuestSoak$$' -baseline=false -timeout $(SOAK_TIMEOUT) -test-timeout $(SOAK_TIMEOUT) \
		-env RBRIDGE_SOAK=$(DURATION) -env RBRIDGE_SOAK_SAMPLE=$(SOAK_SAMPLE)

baseline-docs: deps-vm ## run the guest's perftest/rping baseline and write it into docs/performance.md
	$(VMRUN) -tests=false -docs docs/performance.md

bench: ## benchmarks, with allocations
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

generate: ## regenerate generated code (bpf2go)
	$(GO) generate $(PKGS)

GENERATED := xdp/classifier_bpfel.go xdp/classifier_bpfel.o xdp/classifier_bpfeb.go xdp/classifier_bpfeb.o \
             roce/udpconn/steer_bpfel.go roce/udpconn/steer_bpfel.o roce/udpconn/steer_bpfeb.go roce/udpconn/steer_bpfeb.o

check-generate: generate ## fail when committed generated code (bpf2go) differs from a fresh generation
	@git diff --exit-code --stat -- $(GENERATED) || { echo "generated code is stale: run make generate and commit"; exit 1; }
