# libflagcx.so: FlagCX's C API served by flagcx-go (capi/, docs/c-api.md),
# included by the top Makefile. The module's one cgo build: CGO_ENABLED=1
# here only, whatever the environment says (.ci/run exports 0 for the rest).
#
#   make capi   build/lib/libflagcx.so, build/include/flagcx.h and
#               build/include/flagcx_kernel.h (the one-sided entry FlagCX
#               declares there)
#
# Its C test (capi/capi_test.go: C programs built with $(CC) against these
# two files, several processes on the host backend and on emulated vendor
# runtimes) runs in `make test`.

CAPI_LIB     := $(BUILD)/lib/libflagcx.so
CAPI_HEADER  := $(BUILD)/include/flagcx.h
CAPI_KHEADER := $(BUILD)/include/flagcx_kernel.h
CAPI_GO_SRCS := $(shell find capi core internal sdk -name '*.go' -not -name '*_test.go' 2>/dev/null)
CAPI_C_SRCS  := $(wildcard capi/*.c capi/*.h capi/include/*.h)
CAPI_LDFLAGS := -ldflags "-X github.com/flagcx/flagcx-go/core.Version=$(VERSION) '-extldflags=-Wl,-soname,libflagcx.so'"

.PHONY: capi
all: capi
capi: $(CAPI_LIB) $(CAPI_HEADER) $(CAPI_KHEADER)

$(CAPI_LIB): $(CAPI_GO_SRCS) $(CAPI_C_SRCS) go.mod go.sum
	@mkdir -p $(@D)
	CGO_ENABLED=1 CC=$(CC) $(GO) build -buildmode=c-shared $(CAPI_LDFLAGS) -o $@ ./capi
	@rm -f $(BUILD)/lib/libflagcx.h # cgo's header of the exports; flagcx.h is the API

$(CAPI_HEADER) $(CAPI_KHEADER): $(BUILD)/include/%: capi/include/%
	@mkdir -p $(@D)
	cp $< $@

# make lint vets the module without cgo; the cgo files of capi/ are vetted here.
.PHONY: capi-vet
lint: capi-vet
capi-vet:
	CGO_ENABLED=1 CC=$(CC) $(GO) vet ./capi

-include capi/nccl/nccl.mk
