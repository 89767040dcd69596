# Emulated libibverbs (conformance/vendorsim/ibverbs/ibverbs.c), included by
# conformance/vendorsim/vendorsim.mk:
#
#   build/vendorsim/ibverbs/libibverbs.so.1   soname libibverbs.so.1
#
# Built against the real <infiniband/verbs.h> (libibverbs-dev), so its
# structs are the ones the net-ib plugin compiles against. It stands alone:
# no vendorsim core (it compiles in its socket helpers, core/vsim_sock.c),
# the fabric is TCP.
VSIM_IBVERBS := $(VSIM_OUT)/ibverbs/libibverbs.so.1
IBV_HEADER   ?= /usr/include/infiniband/verbs.h

vendorsim: $(VSIM_IBVERBS)

$(VSIM_IBVERBS): $(VSIM_DIR)/ibverbs/ibverbs.c $(VSIM_DIR)/core/vsim_sock.c $(VSIM_DIR)/core/vsim_sock.h $(VSIM_DIR)/ibverbs/vendor.mk
	@test -f $(IBV_HEADER) || { echo "$(IBV_HEADER) is missing: apt-get install -y libibverbs-dev (rdma-core's headers)"; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(VSIM_CFLAGS) -Wno-format-truncation $(VSIM_LDFLAGS) -Wl,-soname,libibverbs.so.1 -o $@ $< -lrt
