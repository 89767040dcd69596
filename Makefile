# flagcx-go. `make` builds the CLI, every plugin and bin/copybw (the
# pinned-copy bound tools/hetero-bench measures beside each layout); `make
# test` runs every test; `make lint` checks formatting, vet and that no
# function is over 100 lines (tools/funclen). The Go side never uses cgo.
GO        ?= go
CC        ?= gcc
export CGO_ENABLED := 0
BUILD     := build
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOFLAGS_LD := -ldflags "-X github.com/flagcx/flagcx-go/core.Version=$(VERSION)"

.PHONY: all flagcx copybw test lint bench-compare clean fuzz-smoke soak
all: flagcx copybw

flagcx:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS_LD) -o $(BIN)/flagcx ./cmd/flagcx

copybw:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/copybw ./tools/copybw

# C parts (plugins, emulated vendor runtimes) add themselves here.
-include plugins/plugins.mk
-include conformance/vendorsim/vendorsim.mk
-include conformance/conformance.mk
-include capi/capi.mk

# The conformance mutants run in `make conformance` (conformance/conformance.mk).
test: all
	$(GO) test -count=1 -timeout 20m -skip '^($(MUTANT_TESTS))$$' ./...

# Every decoder of what a peer sends has a fuzz target (docs/security.md);
# fuzz-smoke runs each for FUZZTIME on one worker (CI: after make test).
FUZZ_TARGETS := \
	./internal/hostnet:FuzzPeerTable ./internal/hostnet/shm:FuzzSegName ./internal/hostnet:FuzzMeshHello \
	./internal/hostnet/netplugin:FuzzNetNegotiation ./internal/hostnet/netplugin:FuzzNetChunk ./internal/hostnet/tcp:FuzzHandshake \
	./core/internal/hostcomm:FuzzAnnounce ./core/internal/hostcomm:FuzzRendezvousReply ./core:FuzzInitRecord ./core:FuzzUniqueID \
	./core/internal/ctl:FuzzCtl
FUZZTIME ?= 3s
fuzz-smoke:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) tools/fuzz-smoke.sh $(FUZZ_TARGETS)

# The fault, revoke/shrink, one-sided and plans-that-run tests, ROUNDS
# times (20) under BUSY busy loops (3): run it before saying a fault or
# a flake is fixed (tools/soak.sh; about an hour on 2 cores).
soak: all
	@GO=$(GO) tools/soak.sh

# flagcx's host backend beside Gloo and OpenMPI (needs python3-torch, openmpi-bin, libopenmpi-dev).
bench-compare: flagcx
	tools/bench-compare/run.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./tools/funclen -max 100
	@# Switches over sdk.Collective: issue 22's 5 at most, in sdk.Dispatch
	@# and the runners (tools/collswitch says where the ones left are).
	$(GO) run ./tools/collswitch -max 2 >/dev/null

clean:
	rm -rf $(BIN) $(BUILD)
