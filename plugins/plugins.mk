# Vendor plugins: C shims against sdk/include/flagcx_plugin.h. Each dlopens
# its vendor runtime at init, so they build with $(CC) alone (no vendor SDK).
# Every plugins/<name>/ with C sources is a plugin, except plugins/common/:
# the shared shim core (plugins/common/shim.h), compiled into every plugin,
# and the network plugins plugins/net-*/ (their own net-*.mk).
PLUGIN_NAMES   := $(filter-out common net-%,$(sort $(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/*.c))))))
PLUGIN_COMMON  := $(wildcard plugins/common/*.c plugins/common/*.h)
PLUGIN_DIR     := $(BUILD)/plugins
PLUGIN_CFLAGS  ?= -O2
PLUGIN_SOS     := $(PLUGIN_NAMES:%=$(PLUGIN_DIR)/libflagcx-%.so)

.PHONY: plugins
all: plugins
plugins: $(PLUGIN_SOS)

# Only the versioned table is exported; everything else is static.
$(PLUGIN_DIR)/libflagcx-%.so: plugins/%/*.c $(PLUGIN_COMMON) sdk/include/flagcx_plugin.h
	@mkdir -p $(PLUGIN_DIR)
	$(CC) -shared -fPIC $(PLUGIN_CFLAGS) -Wall -Werror -Isdk/include -Iplugins/common -fvisibility=hidden -o $@ $(filter %.c,$^) -ldl

# The nvidia plugin includes the CUDA source of its reduce kernels.
$(PLUGIN_DIR)/libflagcx-nvidia.so: plugins/nvidia/reduce_kernels.h

-include $(wildcard plugins/net-*/net-*.mk)
