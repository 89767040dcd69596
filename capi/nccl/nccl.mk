# libnccl.so.2: NCCL's C API on top of libflagcx.so (capi/nccl/nccl.c,
# docs/nccl.md), included by capi/capi.mk. Plain C, no Go: the process's one
# Go runtime is libflagcx.so's, which this library needs (rpath $ORIGIN).
# -Bsymbolic: its own calls (ncclGroupSimulateEnd's ncclGroupEnd) stay
# inside it even where another NCCL was loaded first (torch's wheel).
#
#   make nccl   build/lib/libnccl.so.2 (+ libnccl.so) and build/include/nccl.h

NCCL_LIB    := $(BUILD)/lib/libnccl.so.2
NCCL_HEADER := $(BUILD)/include/nccl.h

.PHONY: nccl
all: nccl
capi: nccl
nccl: $(NCCL_LIB) $(NCCL_HEADER)

$(NCCL_LIB): capi/nccl/nccl.c capi/nccl/nccl.h capi/include/flagcx.h $(CAPI_LIB)
	@mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wall -Werror -std=gnu11 -fvisibility=hidden -Icapi/include -Icapi/nccl \
	  -Wl,-soname,libnccl.so.2 -Wl,--no-undefined -Wl,-Bsymbolic -o $@ capi/nccl/nccl.c \
	  -L$(BUILD)/lib -lflagcx -Wl,-rpath,'$$ORIGIN' -pthread
	ln -sf libnccl.so.2 $(BUILD)/lib/libnccl.so # for -lnccl

$(NCCL_HEADER): capi/nccl/nccl.h
	@mkdir -p $(@D)
	cp $< $@
