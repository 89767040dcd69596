# The InfiniBand / RoCE network plugin (sdk/include/flagcx_net.h), included
# by plugins/plugins.mk. It is compiled against the real
# <infiniband/verbs.h> (Debian's libibverbs-dev; .ci/run installs it) and
# dlopens libibverbs.so.1 at init, so it links nothing but libdl: the check
# below fails the build if a verbs call slipped in as a link-time symbol.
NET_DIR     := $(BUILD)/net
NET_IB      := $(NET_DIR)/libflagcx-net-ib.so
IBV_HEADER  ?= /usr/include/infiniband/verbs.h

.PHONY: net-plugins
all: net-plugins
net-plugins: $(NET_IB)

$(NET_IB): plugins/net-ib/net_ib.c sdk/include/flagcx_net.h sdk/include/flagcx_plugin.h
	@test -f $(IBV_HEADER) || { echo "$(IBV_HEADER) is missing: apt-get install -y libibverbs-dev (rdma-core's headers)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) -shared -fPIC $(PLUGIN_CFLAGS) -Wall -Werror -Wno-format-truncation -std=gnu11 -Isdk/include -fvisibility=hidden -o $@ $< -ldl -pthread
	@if nm -D --undefined-only $@ | grep -w 'ibv_[a-z_]*'; then echo "$@ links verbs symbols: call them through the dlsym'ed table"; rm -f $@; exit 1; fi
