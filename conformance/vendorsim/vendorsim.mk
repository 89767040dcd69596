# Emulated vendor runtimes (conformance/vendorsim), included by the top
# Makefile. gcc only, no vendor SDK.
#
#   build/vendorsim/libflagcx-vendorsim-core.so   the vendor-neutral core
#   build/vendorsim/nvidia/libcudart.so.13         CUDA runtime 13
#   build/vendorsim/nvidia/libcudart.so.12         CUDA runtime 12 (same source)
#   build/vendorsim/nvidia/libnccl.so.2            NCCL 2.28.9
#   build/vendorsim/nvidia/libnvidia-ml.so.1       NVML
#   build/vendorsim/nvidia/libnvrtc.so.13          NVRTC (records kernel names)
#
# Every vendor library links the core by soname and finds it through
# RUNPATH $ORIGIN/.., so one core (one device-memory registry, one current
# device) serves all vendor libraries a process loads.
#
# `make vendorsim-check` builds and runs a C smoke test under
# AddressSanitizer (not part of `all`; needs libasan).

VSIM_DIR    := conformance/vendorsim
VSIM_OUT    := $(BUILD)/vendorsim
VSIM_CFLAGS := -shared -fPIC -O2 -Wall -Werror -pthread -std=gnu11 -fvisibility=hidden
VSIM_LDFLAGS := -Wl,--no-undefined
VSIM_CORE_SRC := $(wildcard $(VSIM_DIR)/core/*.c)
VSIM_CORE_HDR := $(wildcard $(VSIM_DIR)/core/*.h)
VSIM_CORE   := $(VSIM_OUT)/libflagcx-vendorsim-core.so
VSIM_LINK   := -L$(VSIM_OUT) -lflagcx-vendorsim-core -Wl,-rpath,'$$ORIGIN/..'
VSIM_NVIDIA := $(VSIM_OUT)/nvidia/libcudart.so.13 $(VSIM_OUT)/nvidia/libcudart.so.12 \
               $(VSIM_OUT)/nvidia/libnccl.so.2 $(VSIM_OUT)/nvidia/libnvidia-ml.so.1 \
               $(VSIM_OUT)/nvidia/libnvrtc.so.13

.PHONY: vendorsim vendorsim-check
all: vendorsim
vendorsim: $(VSIM_CORE) $(VSIM_NVIDIA)

$(VSIM_CORE): $(VSIM_CORE_SRC) $(VSIM_CORE_HDR) $(VSIM_DIR)/vendorsim.mk
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-z,nodelete -Wl,-soname,libflagcx-vendorsim-core.so -o $@ $(VSIM_CORE_SRC) -lrt -lm

$(VSIM_OUT)/nvidia/libcudart.so.%: $(VSIM_DIR)/nvidia/cudart.c $(VSIM_DIR)/nvidia/vsim_cubin.h $(VSIM_CORE_HDR) $(VSIM_CORE)
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -DVSIM_CUDART_MAJOR=$* -Wl,-soname,libcudart.so.$* -o $@ $< $(VSIM_LINK)

$(VSIM_OUT)/nvidia/libnccl.so.2: $(VSIM_DIR)/nvidia/nccl.c $(VSIM_CORE_HDR) $(VSIM_CORE)
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libnccl.so.2 -o $@ $< $(VSIM_LINK)

$(VSIM_OUT)/nvidia/libnvrtc.so.13: $(VSIM_DIR)/nvidia/nvrtc.c $(VSIM_DIR)/nvidia/vsim_cubin.h
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libnvrtc.so.13 -o $@ $<

$(VSIM_OUT)/nvidia/libnvidia-ml.so.1: $(VSIM_DIR)/nvidia/nvml.c $(VSIM_CORE_HDR) $(VSIM_CORE)
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) $(VSIM_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 -o $@ $< $(VSIM_LINK)

# Other vendors' layers (kunlunxin, cambricon, metax) each bring their own
# conformance/vendorsim/<vendor>/vendor.mk, which adds its libraries to
# `vendorsim`.
-include $(wildcard $(VSIM_DIR)/*/vendor.mk)

# Smoke test under AddressSanitizer: everything compiled into one program
# (core + NVIDIA layer + test), forking ranks.
vendorsim-check:
	@mkdir -p $(VSIM_OUT)/check
	$(CC) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Wall -Werror -pthread -std=gnu11 \
	  -DVSIM_SINGLE_BINARY -o $(VSIM_OUT)/check/smoke $(VSIM_CORE_SRC) $(VSIM_DIR)/nvidia/cudart.c $(VSIM_DIR)/nvidia/nccl.c \
	  $(VSIM_DIR)/test/smoke.c -lrt -lm
	FLAGCX_VENDORSIM_TIMEOUT=5 $(VSIM_OUT)/check/smoke
